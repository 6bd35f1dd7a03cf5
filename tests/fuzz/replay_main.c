/* SPDX-License-Identifier: MIT
 * ibpshim: runs a libFuzzer target without libFuzzer: every seed file, then seeded random
 * mutations of them, for compilers that have no -fsanitize=fuzzer (CI's gcc build). */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define REPLAY_MAX_SEEDS 256
#define REPLAY_MAX_SIZE (1u << 20)

typedef struct ReplaySeed {
    uint8_t *data;
    size_t size;
} ReplaySeed;

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng_next(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static size_t load_seeds(const char *dir, ReplaySeed *seeds)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    size_t n = 0;
    struct dirent *e;
    while (n < REPLAY_MAX_SEEDS && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "rb");
        if (!f)
            continue;
        uint8_t *buf = malloc(REPLAY_MAX_SIZE);
        const size_t size = buf ? fread(buf, 1, REPLAY_MAX_SIZE, f) : 0;
        fclose(f);
        if (!buf)
            break;
        seeds[n].data = buf;
        seeds[n].size = size;
        n++;
    }
    closedir(d);
    return n;
}

/* Byte flips, overwrites with boundary values, truncation and extension: enough to walk the
 * parsers' error paths under the sanitizers. */
static size_t mutate(uint8_t *buf, size_t size, size_t cap)
{
    const int edits = 1 + (int)(rng_next() % 8);
    for (int i = 0; i < edits; i++) {
        const uint64_t r = rng_next();
        switch (r % 5) {
        case 0:
            if (size)
                buf[(r >> 8) % size] ^= (uint8_t)(1u << ((r >> 40) % 8));
            break;
        case 1:
            if (size) {
                static const uint8_t special[] = {0x00, 0xff, 0x7f, 0x80, 0x01, '\n', '=', '['};
                buf[(r >> 8) % size] = special[(r >> 32) % sizeof(special)];
            }
            break;
        case 2:
            if (size)
                size = (size_t)((r >> 8) % size);
            break;
        case 3:
            if (size < cap)
                buf[size++] = (uint8_t)(r >> 16);
            break;
        default:
            if (size >= 8) {
                const size_t at = (r >> 8) % (size - 7);
                const uint64_t v = rng_next();
                memcpy(buf + at, &v, 8);
            }
            break;
        }
    }
    return size;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR [ITERATIONS]\n", argv[0]);
        return 2;
    }
    const long iterations = argc > 2 ? strtol(argv[2], NULL, 10) : 20000;
    static ReplaySeed seeds[REPLAY_MAX_SEEDS];
    const size_t nseeds = load_seeds(argv[1], seeds);
    for (size_t i = 0; i < nseeds; i++)
        LLVMFuzzerTestOneInput(seeds[i].data, seeds[i].size);
    uint8_t *work = malloc(REPLAY_MAX_SIZE);
    if (!work)
        return 1;
    for (long it = 0; it < iterations; it++) {
        size_t size = 0;
        if (nseeds) {
            const ReplaySeed *s = &seeds[rng_next() % nseeds];
            size = s->size;
            memcpy(work, s->data, size);
        }
        size = mutate(work, size, 4096 > size ? 4096 : size);
        LLVMFuzzerTestOneInput(work, size);
    }
    printf("%zu seeds and %ld mutations replayed without a crash\n", nseeds, iterations);
    free(work);
    for (size_t i = 0; i < nseeds; i++)
        free(seeds[i].data);
    return 0;
}
