// SPDX-License-Identifier: MIT
// ibpshim: validates a JSON document against the subset of JSON Schema that docs/report.schema.json uses.
#ifndef IBP_TESTS_REPORT_SCHEMA_CHECK_H
#define IBP_TESTS_REPORT_SCHEMA_CHECK_H

#include <jansson.h>
#include <regex.h>

#include <string>
#include <vector>

// Keywords: $ref (to #/$defs/NAME), type, const, enum, properties, required,
// additionalProperties, items, minimum, pattern.  Any other keyword in the schema is an error so
// that a schema change cannot silently go unchecked.
class IbpSchemaCheck
{
  public:
    explicit IbpSchemaCheck(json_t *schema) : root_(schema)
    {
    }

    std::vector<std::string> validate(json_t *doc)
    {
        errors_.clear();
        check(doc, root_, "$");
        return errors_;
    }

  private:
    json_t *root_;
    std::vector<std::string> errors_;

    void fail(const std::string &path, const std::string &what)
    {
        errors_.push_back(path + ": " + what);
    }

    // POSIX extended regular expressions cover the schema's patterns (anchors, classes, +).
    static bool matches(const char *text, const char *pattern)
    {
        regex_t re;
        if (regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB) != 0)
            return false;
        const bool ok = regexec(&re, text, 0, nullptr, 0) == 0;
        regfree(&re);
        return ok;
    }

    static bool has_type(json_t *v, const char *type)
    {
        const std::string t = type;
        if (t == "object")
            return json_is_object(v);
        if (t == "array")
            return json_is_array(v);
        if (t == "string")
            return json_is_string(v);
        if (t == "integer")
            return json_is_integer(v);
        if (t == "number")
            return json_is_number(v);
        if (t == "boolean")
            return json_is_boolean(v);
        if (t == "null")
            return json_is_null(v);
        return false;
    }

    void check(json_t *v, json_t *s, const std::string &path)
    {
        const char *kw;
        json_t *arg;
        json_object_foreach (s, kw, arg) {
            const std::string k = kw;
            if (k == "$schema" || k == "$id" || k == "title" || k == "description" || k == "$defs") {
                continue;
            } else if (k == "$ref") {
                const std::string ref = json_string_value(arg);
                const std::string prefix = "#/$defs/";
                json_t *target = ref.rfind(prefix, 0) == 0 ? json_object_get(json_object_get(root_, "$defs"),
                                                                             ref.c_str() + prefix.size())
                                                           : nullptr;
                if (!target)
                    fail(path, "unresolvable $ref " + ref);
                else
                    check(v, target, path);
            } else if (k == "type") {
                bool ok = false;
                if (json_is_string(arg)) {
                    ok = has_type(v, json_string_value(arg));
                } else {
                    size_t i;
                    json_t *t;
                    json_array_foreach (arg, i, t)
                        ok = ok || has_type(v, json_string_value(t));
                }
                if (!ok)
                    fail(path, "wrong type");
            } else if (k == "const") {
                if (!json_equal(v, arg))
                    fail(path, "differs from const");
            } else if (k == "enum") {
                bool ok = false;
                size_t i;
                json_t *e;
                json_array_foreach (arg, i, e)
                    ok = ok || json_equal(v, e);
                if (!ok)
                    fail(path, "not in enum");
            } else if (k == "properties") {
                if (!json_is_object(v))
                    continue;
                const char *name;
                json_t *sub;
                json_object_foreach (arg, name, sub) {
                    json_t *member = json_object_get(v, name);
                    if (member)
                        check(member, sub, path + "." + name);
                }
            } else if (k == "required") {
                if (!json_is_object(v))
                    continue;
                size_t i;
                json_t *name;
                json_array_foreach (arg, i, name) {
                    if (!json_object_get(v, json_string_value(name)))
                        fail(path, std::string("missing ") + json_string_value(name));
                }
            } else if (k == "additionalProperties") {
                if (!json_is_object(v))
                    continue;
                json_t *props = json_object_get(s, "properties");
                const char *name;
                json_t *member;
                json_object_foreach (v, name, member) {
                    if (props && json_object_get(props, name))
                        continue;
                    if (json_is_false(arg))
                        fail(path, std::string("unexpected member ") + name);
                    else if (json_is_object(arg))
                        check(member, arg, path + "." + name);
                }
            } else if (k == "items") {
                if (!json_is_array(v))
                    continue;
                size_t i;
                json_t *e;
                json_array_foreach (v, i, e)
                    check(e, arg, path + "[" + std::to_string(i) + "]");
            } else if (k == "minimum") {
                if (json_is_number(v) && json_number_value(v) < json_number_value(arg))
                    fail(path, "below minimum");
            } else if (k == "pattern") {
                if (json_is_string(v) && !matches(json_string_value(v), json_string_value(arg)))
                    fail(path, std::string("does not match ") + json_string_value(arg));
            } else {
                fail(path, "schema keyword not supported by this checker: " + k);
            }
        }
    }
};

#endif // IBP_TESTS_REPORT_SCHEMA_CHECK_H
