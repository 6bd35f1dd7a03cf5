// SPDX-License-Identifier: MIT
// ibpshim: the JSON report against docs/report.schema.json, the JSON writer, and the text summary.
#include <gtest/gtest.h>

#include <jansson.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "schema_check.h"

extern "C" {
#include "report/json.h"
#include "report/ledger.h"
#include "report/writer.h"
}

namespace
{

std::string source_root()
{
    const char *root = getenv("IBPSHIM_SOURCE_ROOT");
    return root ? root : ".";
}

// Runs write(out) into a temporary file and returns what it wrote.
template <typename F> std::string capture(F write)
{
    FILE *f = tmpfile();
    EXPECT_NE(f, nullptr);
    IbpOut out;
    ibp_out_init(&out, fileno(f));
    write(&out);
    EXPECT_EQ(ibp_out_flush(&out), 0);
    std::string text;
    rewind(f);
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
        text.append(buf, n);
    fclose(f);
    return text;
}

// A ledger state with two sites, three regions (one freed), untracked copies and a series.
struct Fixture {
    IbpLedgerRegion *weights = nullptr;
    IbpLedgerRegion *batch = nullptr;
    uint64_t weights_id = 0;
    uint32_t site_weights = 0, site_batch = 0;

    __attribute__((noinline)) uint32_t capture_weights()
    {
        return ibp_site_capture(0);
    }
    __attribute__((noinline)) uint32_t capture_batch()
    {
        return ibp_site_capture(0);
    }

    Fixture()
    {
        static char w[1 << 12], b[1 << 10];
        ibp_site_set_depth(6);
        site_weights = capture_weights();
        site_batch = capture_batch();
        weights = ibp_ledger_region_open(w, sizeof(w), 0, site_weights);
        batch = ibp_ledger_region_open(b, sizeof(b), 1, site_batch);
        IbpLedgerRegionInfo info;
        ibp_ledger_region_read(weights, &info);
        weights_id = info.id;
        for (int i = 0; i < 10; i++) {
            ibp_ledger_copy(weights, 4096);
            ibp_ledger_compressed(weights, 4000, 1000);
            ibp_ledger_raw(weights, IBP_RAW_STALE, 96);
            ibp_ledger_routed(weights, 20000, 30000, 5000);
        }
        ibp_ledger_dma(weights, 1000, 25);
        ibp_ledger_invalidated(weights, 3);
        ibp_ledger_recompressed(weights, 3);
        ibp_ledger_shadow(weights, 1000);
        ibp_ledger_decoded(weights, 40000, 1000);
        ibp_ledger_copy_raw(batch, IBP_RAW_CHURN, 1024);
        IbpLedgerRegion *gone = ibp_ledger_region_open(b, 16, 0, site_batch);
        ibp_ledger_copy_raw(gone, IBP_RAW_COLD, 16);
        ibp_ledger_region_close(&gone);
        ibp_ledger_copy_raw(nullptr, IBP_RAW_NOT_PINNED, 77);
    }
    ~Fixture()
    {
        ibp_ledger_region_close(&weights);
        ibp_ledger_region_close(&batch);
    }
};

std::string report_json(const char *reason)
{
    IbpLedgerSnapshot *snap = nullptr;
    EXPECT_EQ(ibp_ledger_snapshot(&snap), 0);
    IbpReportSample series[3];
    for (int i = 0; i < 3; i++) {
        ibp_report_sample_of(snap, &series[i]);
        series[i].elapsed_ns = (uint64_t)i * 1000;
    }
    IbpReportMeta meta = {};
    meta.reason = reason;
    meta.sequence = 4;
    meta.pid = getpid();
    meta.time_unix_ns = 1700000000000000000ull;
    meta.pcie_gbps = 55.5;
    meta.series = series;
    meta.series_count = 3;
    const std::string text =
        capture([&](IbpOut *out) { EXPECT_EQ(ibp_report_format_json(out, snap, &meta), 0); });
    ibp_ledger_snapshot_free(&snap);
    return text;
}

json_t *load_schema()
{
    json_error_t err;
    json_t *schema = json_load_file((source_root() + "/docs/report.schema.json").c_str(), 0, &err);
    EXPECT_NE(schema, nullptr) << err.text;
    return schema;
}

json_t *find_by_id(json_t *array, uint64_t id)
{
    size_t i;
    json_t *e;
    json_array_foreach (array, i, e) {
        if ((uint64_t)json_integer_value(json_object_get(e, "id")) == id)
            return e;
    }
    return nullptr;
}

uint64_t u64(json_t *obj, const char *path)
{
    // "a.b.c"
    std::string p = path;
    size_t start = 0;
    json_t *v = obj;
    while (v) {
        const size_t dot = p.find('.', start);
        v = json_object_get(v, p.substr(start, dot - start).c_str());
        if (dot == std::string::npos)
            break;
        start = dot + 1;
    }
    EXPECT_TRUE(json_is_integer(v)) << path;
    return (uint64_t)json_integer_value(v);
}

} // namespace

TEST(ReportJson, ValidAgainstTheSchemaWithKnownValues)
{
    Fixture fx;
    const std::string text = report_json("request");
    json_error_t err;
    json_t *doc = json_loads(text.c_str(), JSON_REJECT_DUPLICATES, &err);
    ASSERT_NE(doc, nullptr) << err.text << " at line " << err.line << "\n" << text;
    json_t *schema = load_schema();
    ASSERT_NE(schema, nullptr);
    IbpSchemaCheck check(schema);
    const auto errors = check.validate(doc);
    for (const auto &e : errors)
        ADD_FAILURE() << e;

    EXPECT_STREQ(json_string_value(json_object_get(doc, "schema")), "ibpshim-report/4");
    EXPECT_STREQ(json_string_value(json_object_get(doc, "reason")), "request");
    EXPECT_EQ(u64(doc, "sequence"), 4u);
    EXPECT_EQ(json_array_size(json_object_get(doc, "series")), 3u);

    json_t *region = find_by_id(json_object_get(doc, "regions"), fx.weights_id);
    ASSERT_NE(region, nullptr);
    EXPECT_EQ(u64(region, "counters.copies"), 10u);
    EXPECT_EQ(u64(region, "counters.requested_bytes"), 40960u);
    EXPECT_EQ(u64(region, "counters.sent_bytes"), 10000u + 960u);
    EXPECT_EQ(u64(region, "counters.saved_bytes"), 40960u - 10960u);
    EXPECT_EQ(u64(region, "counters.compressed_bytes"), 40000u);
    EXPECT_EQ(u64(region, "counters.raw_bytes.stale"), 960u);
    EXPECT_EQ(u64(region, "counters.shadow_bytes"), 1000u);
    EXPECT_EQ(u64(region, "counters.routed_copies"), 10u);
    EXPECT_EQ(u64(region, "counters.lookup_ns"), 200000u);
    EXPECT_EQ(u64(region, "counters.enqueue_ns"), 300000u);
    EXPECT_EQ(u64(region, "counters.staging_wait_ns"), 50000u);
    EXPECT_EQ(u64(region, "counters.dma_ns"), 25u);
    EXPECT_EQ(u64(region, "counters.dma_bytes"), 1000u);
    EXPECT_EQ(u64(region, "site"), fx.site_weights);
    EXPECT_FALSE(json_is_true(json_object_get(region, "freed")));
    EXPECT_NEAR(json_real_value(json_object_get(json_object_get(region, "counters"), "ratio")),
                40960.0 / 10960.0, 1e-5);
    EXPECT_NEAR(json_number_value(json_object_get(json_object_get(region, "counters"), "time_saved_s")),
                30000.0 / 55.5e9, 1e-9);

    json_t *site = find_by_id(json_object_get(doc, "sites"), fx.site_batch);
    ASSERT_NE(site, nullptr);
    EXPECT_EQ(u64(site, "regions"), 2u);
    EXPECT_EQ(u64(site, "regions_live"), 1u);
    EXPECT_EQ(u64(site, "counters.raw_bytes.churn"), 1024u);
    EXPECT_EQ(u64(site, "counters.raw_bytes.cold"), 16u);
    json_t *frames = json_object_get(site, "frames");
    ASSERT_GE(json_array_size(frames), 1u);
    EXPECT_NE(std::string(json_string_value(json_object_get(json_array_get(frames, 0), "module"))), "");

    // Totals include untracked copies; untracked counts only those.
    EXPECT_GE(u64(doc, "untracked.raw_bytes.not_pinned"), 77u);
    EXPECT_GE(u64(doc, "totals.copies"), 10u + 1u + 1u + 1u);
    json_decref(schema);
    json_decref(doc);
}

TEST(ReportJson, SchemaCheckerRejectsBrokenDocuments)
{
    Fixture fx;
    json_t *schema = load_schema();
    ASSERT_NE(schema, nullptr);
    IbpSchemaCheck check(schema);
    const std::string text = report_json("exit");
    const char *breakers[] = {"schema", "totals", "series", "pid"};
    for (const char *key : breakers) {
        json_t *doc = json_loads(text.c_str(), 0, nullptr);
        ASSERT_NE(doc, nullptr);
        json_object_del(doc, key);
        EXPECT_FALSE(check.validate(doc).empty()) << "without " << key;
        json_decref(doc);
    }
    json_t *doc = json_loads(text.c_str(), 0, nullptr);
    json_object_set_new(json_object_get(json_object_get(doc, "totals"), "raw_bytes"), "stale",
                        json_integer(-1));
    EXPECT_FALSE(check.validate(doc).empty());
    json_object_set_new(doc, "reason", json_string("because"));
    json_object_set_new(doc, "extra", json_true());
    EXPECT_GE(check.validate(doc).size(), 3u);
    json_decref(doc);
    json_decref(schema);
}

TEST(JsonWriter, EscapesAndAlwaysProducesValidUtf8)
{
    const char nasty[] =
        "q\"b\\s/\n\t\x01 caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 bad:\xff\xc3(\xed\xa0\x80\xe0\x80\xaf|";
    const std::string text = capture([&](IbpOut *out) {
        IbpJson j;
        ibp_json_init(&j, out);
        ibp_json_object_begin(&j, nullptr, 0);
        ibp_json_string(&j, "s", nasty);
        ibp_json_string(&j, nasty, "key");
        ibp_json_array_begin(&j, "a", 1);
        ibp_json_string(&j, nullptr, "x");
        ibp_json_uint(&j, nullptr, UINT64_C(9007199254740993));
        ibp_json_int(&j, nullptr, -5);
        ibp_json_double(&j, nullptr, 0.1);
        ibp_json_double(&j, nullptr, 1.0 / 0.0);
        ibp_json_bool(&j, nullptr, 1);
        ibp_json_hex(&j, nullptr, 0xdeadbeef);
        ibp_json_object_begin(&j, nullptr, 0);
        ibp_json_object_end(&j);
        ibp_json_array_end(&j);
        ibp_json_array_begin(&j, "empty", 0);
        ibp_json_array_end(&j);
        ibp_json_object_end(&j);
    });
    json_error_t err;
    json_t *doc = json_loads(text.c_str(), JSON_REJECT_DUPLICATES, &err);
    ASSERT_NE(doc, nullptr) << err.text << "\n" << text;
    EXPECT_STREQ(
        json_string_value(json_object_get(doc, "s")),
        "q\"b\\s/\n\t\x01 caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 bad:\xef\xbf\xbd\xef\xbf\xbd(\xef\xbf\xbd"
        "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd|");
    json_t *a = json_object_get(doc, "a");
    ASSERT_EQ(json_array_size(a), 8u);
    EXPECT_EQ(json_integer_value(json_array_get(a, 1)), 9007199254740993ll);
    EXPECT_EQ(json_integer_value(json_array_get(a, 2)), -5);
    EXPECT_DOUBLE_EQ(json_number_value(json_array_get(a, 3)), 0.1);
    EXPECT_EQ(json_number_value(json_array_get(a, 4)), 0.0);
    EXPECT_TRUE(json_is_true(json_array_get(a, 5)));
    EXPECT_STREQ(json_string_value(json_array_get(a, 6)), "0xdeadbeef");
    EXPECT_EQ(json_array_size(json_object_get(doc, "empty")), 0u);
    json_decref(doc);
}

TEST(JsonWriter, WritesPastItsBufferAndReportsErrors)
{
    std::string big(3 * IBP_OUT_BUFFER + 17, 'x');
    const std::string text = capture([&](IbpOut *out) {
        IbpJson j;
        ibp_json_init(&j, out);
        ibp_json_array_begin(&j, nullptr, 0);
        for (int i = 0; i < 3; i++)
            ibp_json_string(&j, nullptr, big.c_str());
        ibp_json_array_end(&j);
    });
    json_t *doc = json_loads(text.c_str(), 0, nullptr);
    ASSERT_NE(doc, nullptr);
    EXPECT_EQ(json_string_length(json_array_get(doc, 2)), big.size());
    json_decref(doc);

    IbpOut out;
    ibp_out_init(&out, -1);
    ibp_out_puts(&out, "lost");
    EXPECT_EQ(ibp_out_flush(&out), -EBADF);
    ibp_out_write(&out, big.data(), big.size());
    EXPECT_EQ(ibp_out_flush(&out), -EBADF);
}

TEST(JsonWriter, FormatsDoublesWithoutTheLocale)
{
    char buf[64];
    const struct {
        double v;
        int decimals;
        const char *text;
    } cases[] = {
        {0, 6, "0.0"},
        {2.5, 6, "2.5"},
        {3, 2, "3.0"},
        {-1.25, 2, "-1.25"},
        {1.0 / 3.0, 6, "0.333333"},
        {2.0 / 3.0, 2, "0.67"},
        {123456.789, 0, "123457"},
        {-0.0000001, 3, "0.0"},
        {1e300, 1, "1000000000000000000.0"},
        {0.0 / 0.0, 3, "0.0"},
    };
    for (const auto &c : cases) {
        ibp_format_double(buf, sizeof(buf), c.v, c.decimals);
        EXPECT_STREQ(buf, c.text) << c.v;
    }
    EXPECT_EQ(ibp_format_double(buf, 4, 12345.5, 1), 7u);
    EXPECT_STREQ(buf, "123");
}

TEST(ReportText, SummaryNamesTotalsReasonsAndTopEntries)
{
    Fixture fx;
    IbpLedgerSnapshot *snap = nullptr;
    ASSERT_EQ(ibp_ledger_snapshot(&snap), 0);
    IbpReportMeta meta = {};
    meta.reason = "exit";
    meta.sequence = 1;
    meta.pid = 42;
    meta.pcie_gbps = 55.5;
    const std::string text =
        capture([&](IbpOut *out) { EXPECT_EQ(ibp_report_format_text(out, snap, &meta, 3), 0); });
    ibp_ledger_snapshot_free(&snap);
    EXPECT_NE(text.find("ibpshim: transfer report (exit #1, pid 42,"), std::string::npos) << text;
    EXPECT_NE(text.find("raw stale"), std::string::npos) << text;
    EXPECT_NE(text.find("raw churn"), std::string::npos) << text;
    EXPECT_NE(text.find("top sites by bytes saved"), std::string::npos) << text;
    EXPECT_NE(text.find("region " + std::to_string(fx.weights_id) + " (4.0 KiB"), std::string::npos) << text;
    EXPECT_NE(text.find("at 55.5 GB/s"), std::string::npos) << text;
    EXPECT_NE(text.find("lookup 20.0 us, enqueue 30.0 us (staging waits 5.0 us) on the host"), std::string::npos) << text;
    EXPECT_NE(text.find("DMA 40.0 GB/s, decode 40.0 GB/s"), std::string::npos) << text;
    size_t lines = 0, pos = 0;
    while ((pos = text.find('\n', pos)) != std::string::npos) {
        pos++;
        lines++;
    }
    // Totals (8 lines plus one per raw reason) and at most 3 sites and 3 regions with headers.
    EXPECT_LE(lines, 10u + IBP_RAW_REASON_COUNT + 2u + 6u);
    for (size_t start = 0; start < text.size();) {
        EXPECT_EQ(text.compare(start, 9, "ibpshim: "), 0) << text.substr(start, 40);
        start = text.find('\n', start) + 1;
    }
}

// "--emit-report FILE": writes a report with the fixture state for the Python schema check.
int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--emit-report") == 0) {
        Fixture fx;
        const std::string text = report_json("exit");
        FILE *f = fopen(argv[2], "w");
        if (!f)
            return 1;
        fputs(text.c_str(), f);
        return fclose(f) == 0 ? 0 : 1;
    }
    ::testing::InitGoogleTest(&argc, argv);
    return RUN_ALL_TESTS();
}
