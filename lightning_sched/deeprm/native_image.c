/* DeepRM's image observation (observations.render_image) and the used rows it is drawn from
 * (state.used_rows), rendered episode by episode from the state: every block row is ones then zeros,
 * one compare-and-select loop. Level planes only (resource_units <= 62): used[k][r] is the highest
 * level whose bit k is set. Arguments: one int64 array in the order of ImageArgs (native.py's
 * IMAGE_SIZES, IMAGE_READ, then the two outputs); rows [row_begin, row_end). */
#include <stdint.h>

#include "../native_rows.h"

typedef struct {
    int64_t batch, horizon, num_resources, resource_units, num_slots, max_job_units, num_planes, num_words,
        word_bytes, backlog_size, backlog_width, image_width;
    const void *used_bits;          /* [B, R, P, W] int32 or int64 words */
    const int32_t *slot_duration;   /* [B, M] */
    const int32_t *slot_demand;     /* [B, R, M] */
    const int64_t *num_arrived;     /* [B] */
    const int64_t *queue_head;      /* [B] */
    const float *since_new;         /* [B], the observation key (observations._since_new) */
    float *image;                   /* out [B, T, image_width] */
    int64_t *used;                  /* out [B, T, R] */
} ImageArgs;

static inline int64_t word_at(const ImageArgs *a, int64_t index) {
    return a->word_bytes == 4 ? ((const int32_t *)a->used_bits)[index] : ((const int64_t *)a->used_bits)[index];
}

/* n ones then width - n zeros (0 <= n <= width) */
static inline float *ones_then_zeros(float *cell, int64_t n, int64_t width) {
    for (int64_t c = 0; c < width; c++) cell[c] = c < n ? 1.0f : 0.0f;  /* one compare-and-select a cell: vectorizes */
    return cell + width;
}

int lightning_sched_render_rows(const ImageArgs *a, int64_t row_begin, int64_t row_end) {
    const int64_t t_rows = a->horizon, r_count = a->num_resources, units = a->resource_units;
    const int64_t m = a->num_slots, mu = a->max_job_units, planes = a->num_planes, words = a->num_words;
    const int64_t bits = a->word_bytes == 4 ? 31 : 63;
    for (int64_t b = row_begin; b < row_end; b++) {
        int64_t *used = a->used + b * t_rows * r_count;
        for (int64_t r = 0; r < r_count; r++) {
            const int64_t plane0 = (b * r_count + r) * planes * words;
            for (int64_t k = 0; k < t_rows; k++) {
                const int64_t w = k / bits, bit = k % bits;
                int64_t level = 0;  /* levels are nested: the first clear one from the bottom ends the count */
                while (level < units && ((word_at(a, plane0 + (level + 1) * words + w) >> bit) & 1)) level++;
                used[k * r_count + r] = level;
            }
        }
        const int32_t *duration = a->slot_duration + b * m;
        const int32_t *demand = a->slot_demand + b * r_count * m;
        int64_t backlog = a->num_arrived[b] - a->queue_head[b];
        if (backlog > a->backlog_size) backlog = a->backlog_size;
        const float since_new = a->since_new[b];
        for (int64_t k = 0; k < t_rows; k++) {
            float *cell = a->image + (b * t_rows + k) * a->image_width;
            for (int64_t r = 0; r < r_count; r++) {
                cell = ones_then_zeros(cell, used[k * r_count + r], units);
                for (int64_t i = 0; i < m; i++)
                    cell = ones_then_zeros(cell, k < duration[i] ? demand[r * m + i] : 0, mu);
            }
            int64_t left = backlog - k * a->backlog_width;
            left = left < 0 ? 0 : (left > a->backlog_width ? a->backlog_width : left);
            cell = ones_then_zeros(cell, left, a->backlog_width);
            *cell = since_new;
        }
    }
    return 0;
}

/* 8-byte fields of ImageArgs: native.py checks its argument array against it */
int64_t lightning_sched_render_args(void) { return (int64_t)(sizeof(ImageArgs) / 8); }

static int render_rows(const void *args, double unused, int64_t row_begin, int64_t row_end) {
    (void)unused;
    return lightning_sched_render_rows((const ImageArgs *)args, row_begin, row_end);
}

/* Every row, spread over threads (native_rows.h). */
int lightning_sched_render_all(const ImageArgs *a, int64_t batch, int64_t min_rows) {
    return over_rows(render_rows, a, 0.0, batch, min_rows);
}
