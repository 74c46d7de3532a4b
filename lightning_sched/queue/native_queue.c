/* The queue environment's step and window for rows [row_begin, row_end) of a batch, one row at a
 * time (native.py builds, loads and calls it; step_torch.py is the same semantics in torch ops, and
 * tests/test_queue_env.py holds the two equal). The semantics, ADVANCE and STEP(j) with EASY's shadow,
 * are stated once, in step.py's docstring (docs/hpc_queue.md, "Semantics").
 *
 * Jobs of a row are in arrival order, so FCFS order is index order, and every job below `first_live`
 * (the first not ended) or at or above `next_arrival` is neither waiting nor running: scans cover that band.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../native_rows.h"

enum { FUTURE = 0, WAITING = 1, RUNNING = 2, ENDED = 3 }; /* state.py's status codes */
/* config.py's constants (tests/test_queue_env.py holds them equal) */
#define FEATURES 4         /* JOB_FEATURES */
#define CLUSTER_FEATURES 2 /* CLUSTER_FEATURES */
#define QUEUE_WINDOWS 4.0  /* the queue-length feature's scale, in windows */
#define MINUTE 60.0        /* a span feature: log1p(seconds / MINUTE) / LOG_SPAN */
#define LOG_SPAN 8.0

/* Every field is 8 bytes, in the order of native.py's SIZES, SCALARS, READ, IN_PLACE and OUT. */
typedef struct {
    int64_t batch, length, window, backfill, nodes, processors;
    double threshold, max_wait, max_requested;
    /* read only: the sequences [B, L] and the picked job per row (-1: only build the window) */
    const int64_t *submit, *run, *requested, *processors_of, *nodes_of, *job;
    /* the state, mutated in place */
    int8_t *status;
    int64_t *start, *start_rank, *time, *free_nodes, *next_arrival;
    uint8_t *done;
    double *bsld_sum;
    int32_t *sjf_order, *size_order; /* the window's kept sorted orders (state.py), [B, L] */
    int64_t *order_count, *order_arrival;
    /* fresh outputs */
    double *bsld_added;                 /* [B] */
    int32_t *window_job;                /* [B, W], -1 for an empty slot (int32: a quarter of the step's writes) */
    float *job_features;                /* [B, W, FEATURES] */
    float *cluster_features;            /* [B, CLUSTER_FEATURES] */
    uint8_t *action_mask;               /* [B, W] */
    int64_t *queue_length;              /* [B] */
    float *fit_delay;                   /* [B, W], or NULL: not asked for (QueueConfig.fit_delay) */
} QueueArgs;

/* A running job in the row's heap of running jobs: ordered by actual end, then by start rank
 * (of jobs ending in the same second, the one started first ends first). */
typedef struct { int64_t end, rank, job; } Running;

/* One row while it steps. Its running jobs are also kept in a binary min-heap (`running`), so an
 * event finds the next end at its top instead of searching the row's jobs. */
typedef struct {
    const QueueArgs *a;
    int64_t L, first_live, next_arrival, waiting, time, free; /* first job not ended, next to arrive, queued */
    const int64_t *submit, *run, *requested, *processors, *nodes;
    int8_t *status;
    int64_t *start, *start_rank, started;
    Running *running;
    int64_t num_running; /* -1 until the heap is built */
    double bsld;
} Row;

static int before(const Running *x, const Running *y) { return x->end < y->end || (x->end == y->end && x->rank < y->rank); }

static void sift_down(Running *h, int64_t n, int64_t i) {
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= n) return;
        if (c + 1 < n && before(&h[c + 1], &h[c])) c++;
        if (!before(&h[c], &h[i])) return;
        Running t = h[i];
        h[i] = h[c], h[c] = t, i = c;
    }
}

static void push_running(Row *r, Running x) {
    int64_t i = r->num_running++;
    Running *h = r->running;
    h[i] = x;
    while (i > 0 && before(&h[i], &h[(i - 1) / 2])) {
        Running t = h[i];
        h[i] = h[(i - 1) / 2], h[(i - 1) / 2] = t, i = (i - 1) / 2;
    }
}

static void start_job(Row *r, int64_t k) {
    double run = (double)r->run[k];
    double bound = run > r->a->threshold ? run : r->a->threshold;
    double slowdown = (double)(r->time - r->submit[k] + r->run[k]) / bound;
    r->bsld += slowdown > 1.0 ? slowdown : 1.0;
    r->status[k] = RUNNING;
    r->start[k] = r->time;
    r->start_rank[k] = r->started++;
    r->free -= r->nodes[k];
    r->waiting--;
    if (r->num_running >= 0) push_running(r, (Running){r->time + r->run[k], r->start_rank[k], k});
}

/* The heap, built at the first event of a step (a pick that fits and leaves jobs waiting needs
 * none: most steps of a good policy). */
static void list_running(Row *r) {
    if (r->num_running >= 0) return;
    int64_t n = 0;
    for (int64_t k = r->first_live; k < r->next_arrival; k++)
        if (r->status[k] == RUNNING) r->running[n++] = (Running){r->start[k] + r->run[k], r->start_rank[k], k};
    r->num_running = n;
    for (int64_t i = n / 2 - 1; i >= 0; i--) sift_down(r->running, n, i);
}

/* One event: an arrival (when one is due no later than the earliest end, or nothing runs) or one
 * end. Returns 1 for an arrival. */
static int advance(Row *r) {
    list_running(r);
    const Running *top = r->num_running > 0 ? &r->running[0] : NULL;
    if (r->next_arrival < r->L && (!top || r->submit[r->next_arrival] <= top->end)) {
        if (r->submit[r->next_arrival] > r->time) r->time = r->submit[r->next_arrival];
        r->status[r->next_arrival++] = WAITING;
        r->waiting++;
        return 1;
    } else {
        int64_t k = top->job;
        if (top->end > r->time) r->time = top->end;
        r->status[k] = ENDED;
        r->free += r->nodes[k];
        r->running[0] = r->running[--r->num_running];
        sift_down(r->running, r->num_running, 0);
        while (r->first_live < r->next_arrival && r->status[r->first_live] == ENDED) r->first_live++;
    }
    return 0;
}

/* The first k in [from, to) whose status is not ENDED (to when none): eight statuses a load, as
 * the ended jobs at a row's front run to a few hundred late in an episode. */
static int64_t first_not_ended(const int8_t *status, int64_t from, int64_t to) {
    const uint64_t all_ended = 0x0303030303030303ULL; /* ENDED in every byte */
    for (; from + 8 <= to; from += 8) {
        uint64_t word;
        memcpy(&word, status + from, 8);
        if (word != all_ended) break;
    }
    while (from < to && status[from] == ENDED) from++;
    return from;
}

/* How many of the statuses in [from, to) are WAITING (a plain count the compiler vectorizes). */
static int64_t count_waiting(const int8_t *status, int64_t from, int64_t to) {
    int64_t n = 0;
    for (int64_t k = from; k < to; k++) n += status[k] == WAITING;
    return n;
}

#define INDEX_BITS 24 /* a packed key: a sort value above, a job's index (or nodes) below */
static uint64_t pack(int64_t value, int64_t low) { return ((uint64_t)value << INDEX_BITS) | (uint64_t)low; }
static const uint64_t LOW = ((uint64_t)1 << INDEX_BITS) - 1;

/* Ascending sort of packed keys: quicksort on the median of three, insertion sort below 16. */
static void sort_keys(uint64_t *x, int64_t n) {
    while (n > 16) {
        uint64_t a = x[0], b = x[n / 2], c = x[n - 1];
        uint64_t pivot = a < b ? (b < c ? b : (a < c ? c : a)) : (a < c ? a : (b < c ? c : b));
        int64_t i = 0, j = n - 1;
        while (i <= j) {
            while (x[i] < pivot) i++;
            while (x[j] > pivot) j--;
            if (i <= j) {
                uint64_t t = x[i];
                x[i++] = x[j], x[j--] = t;
            }
        }
        if (j + 1 < n - i) sort_keys(x, j + 1), x += i, n -= i; /* recurse into the smaller side */
        else sort_keys(x + i, n - i), n = j + 1;
    }
    for (int64_t i = 1; i < n; i++) {
        uint64_t v = x[i];
        int64_t j = i - 1;
        while (j >= 0 && x[j] > v) x[j + 1] = x[j], j--;
        x[j + 1] = v;
    }
}

/* The running jobs by estimated end (start + requested) into `keys`, packed (end, nodes); how many.
 * How jobs ending at the same estimate are ordered cannot change the end at which a job fits.
 * Inlined: as a call, EASY's steps took 5-7% longer (queue_kernel_ab.py, three runs). */
static inline __attribute__((always_inline)) int64_t requested_ends(Row *r, uint64_t *keys) {
    list_running(r);
    int64_t n = r->num_running;
    for (int64_t i = 0; i < n; i++) {
        int64_t k = r->running[i].job;
        keys[i] = pack(r->start[k] + r->requested[k], r->nodes[k]);
    }
    sort_keys(keys, n);
    return n;
}

/* EASY's shadow time of job j: the estimated end of the running job at which, taking running jobs
 * by estimated end (requested_ends), enough nodes are free for j. */
static int64_t shadow_time(Row *r, int64_t j, uint64_t *scratch) {
    int64_t n = requested_ends(r, scratch);
    int64_t free = r->free, shadow = r->time;
    for (int64_t i = 0; i < n; i++) {
        free += (int64_t)(scratch[i] & LOW);
        shadow = (int64_t)(scratch[i] >> INDEX_BITS);
        if (free >= r->nodes[j]) break;
    }
    return shadow;
}

static void step_row(Row *r, int64_t j, uint64_t *scratch) {
    if (r->nodes[j] > r->free) {
        int64_t shadow = r->a->backfill ? shadow_time(r, j, scratch) : 0;
        /* A pass after an arrival tries the arrived job only: every other waiting job failed the
         * pass before with at least as many free nodes (starts only take nodes) at no later time. */
        for (int arrived = 0; r->nodes[j] > r->free; arrived = advance(r))
            if (r->a->backfill) /* nothing can start on a full cluster */
                for (int64_t k = arrived ? r->next_arrival - 1 : r->first_live; k < r->next_arrival && r->free > 0;
                     k++)
                    if (r->status[k] == WAITING && r->nodes[k] <= r->free && r->time + r->requested[k] < shadow)
                        start_job(r, k);
    }
    start_job(r, j);
    while (r->waiting == 0 && r->next_arrival < r->L) advance(r);
}

/* One kept order (job indices ascending by (value, index)) brought up to date: the jobs that no
 * longer wait dropped, the `n` jobs that arrived since it was written (`fresh`, packed keys,
 * sorted) merged in, from the back. Returns its new length. */
static int64_t update_order(int32_t *order, int64_t count, const int64_t *value, const int8_t *status,
                            const uint64_t *fresh, int64_t n) {
    int64_t kept = 0;
    for (int64_t i = 0; i < count; i++)
        if (status[order[i]] == WAITING) order[kept++] = order[i];
    int64_t i = kept - 1, out = kept + n - 1;
    for (int64_t j = n - 1; j >= 0; out--) {
        if (i >= 0 && pack(value[order[i]], order[i]) > fresh[j]) order[out] = order[i--];
        else order[out] = (int32_t)(fresh[j--] & LOW);
    }
    return kept + n;
}

/* The row's SJF order (requested, submit) and smallest-first order (processors, submit) of its
 * waiting jobs, in the state's kept orders. They hold the jobs waiting when they were last written
 * (order_count of them) and every job since then arrived at or after order_arrival, as jobs only
 * move forward (FUTURE, WAITING, RUNNING, ENDED): so only the new arrivals are sorted, a few a step
 * instead of the whole queue. A kept order that does not add up (a state changed by other means)
 * is rebuilt from the whole queue. */
static void update_orders(const Row *r, int64_t b, uint64_t *by_sjf, uint64_t *by_size) {
    int64_t L = r->L, *count = r->a->order_count + b, *arrival = r->a->order_arrival + b;
    int32_t *sjf = r->a->sjf_order + b * L, *size = r->a->size_order + b * L;
    for (int attempt = 0; attempt < 2; attempt++) {
        int64_t from = *arrival, m = 0;
        if (attempt || *count < 0 || *count > from || from > r->next_arrival) *count = 0, from = 0;
        for (int64_t k = from > r->first_live ? from : r->first_live; k < r->next_arrival; k++) {
            if (r->status[k] != WAITING) continue;
            by_sjf[m] = pack(r->requested[k], k), by_size[m] = pack(r->processors[k], k), m++;
        }
        sort_keys(by_sjf, m);
        sort_keys(by_size, m);
        int64_t n = update_order(sjf, *count, r->requested, r->status, by_sjf, m);
        int64_t n2 = update_order(size, *count, r->processors, r->status, by_size, m);
        *count = n, *arrival = r->next_arrival;
        if (n == r->waiting && n2 == r->waiting) return;
    }
}

/* The visible window: the waiting jobs in FCFS order when they fit in it, else RLScheduler's
 * alternation of the SJF order and the smallest-first order (update_orders), each job once.
 * Returns how many slots it filled, the first ones; the caller writes the empty ones. */
static int64_t build_window(const Row *r, int64_t b, int64_t *window, uint64_t *by_sjf, uint64_t *by_size,
                            uint8_t *seen) {
    int64_t W = r->a->window, n = 0;
    if (r->waiting <= W) {
        /* no branch: running and waiting jobs interleave */
        for (int64_t k = r->first_live; k < r->next_arrival && n < r->waiting; k++)
            window[n] = k, n += r->status[k] == WAITING;
    } else {
        update_orders(r, b, by_sjf, by_size);
        const int32_t *sjf = r->a->sjf_order + b * r->L, *size = r->a->size_order + b * r->L;
        for (int64_t i = 0; i < r->waiting; i++) seen[sjf[i]] = 0;
        for (int64_t i = 0; n < W; i++) {
            int64_t s = sjf[i], t = size[i];
            if (!seen[s]) seen[s] = 1, window[n++] = s;
            if (n < W && !seen[t]) seen[t] = 1, window[n++] = t;
        }
    }
    return n;
}

/* How long until each of the `filled` window slots' jobs would fit if nothing else started
 * (step.py's fit_delay, the same numbers): running jobs free their nodes at their requested ends,
 * taken in that order (requested_ends), and the job fits at the first end after which enough nodes
 * are free; log1p(seconds / MINUTE) / LOG_SPAN (step.span_feature), 0 when it fits now and for
 * the W - filled empty slots. `ends` and `freed` are scratch of the row's length. */
static void write_fit_delay(Row *r, const int64_t *window, int64_t filled, int64_t W, uint64_t *ends, int64_t *freed,
                            float *out) {
    int64_t n = -1;
    memset(out + filled, 0, sizeof(float) * (size_t)(W - filled));
    for (int64_t i = 0; i < filled; i++) {
        int64_t k = window[i];
        if (r->nodes[k] <= r->free) {
            out[i] = 0.0f;
            continue;
        }
        if (n < 0) { /* once a row, when some job does not fit */
            n = requested_ends(r, ends);
            for (int64_t m = 0, total = r->free; m < n; m++) freed[m] = total += (int64_t)(ends[m] & LOW);
        }
        int64_t lo = 0, hi = n; /* the first m with freed[m] >= need */
        while (lo < hi) {
            int64_t mid = (lo + hi) / 2;
            if (freed[mid] >= r->nodes[k]) hi = mid;
            else lo = mid + 1;
        }
        int64_t when = lo < n ? (int64_t)(ends[lo] >> INDEX_BITS) : INT64_MAX; /* never: all freed fit any job */
        int64_t seconds = when > r->time ? when - r->time : 0;
        out[i] = (float)(log1p((double)seconds / MINUTE) / LOG_SPAN);
    }
}

int lightning_sched_queue_rows(const QueueArgs *a, double unused, int64_t row_begin, int64_t row_end) {
    (void)unused;
    int64_t L = a->length, W = a->window;
    uint64_t *ends = malloc(sizeof(uint64_t) * (size_t)L);
    uint64_t *keys = malloc(sizeof(uint64_t) * 2 * (size_t)L);
    Running *running = malloc(sizeof(Running) * (size_t)L);
    uint8_t *seen = malloc((size_t)L);
    int64_t *window = malloc(sizeof(int64_t) * (size_t)W);
    if (!ends || !keys || !running || !seen || !window) {
        free(ends), free(keys), free(running), free(seen), free(window);
        return 1;
    }
    double queue_scale = log1p(QUEUE_WINDOWS * (double)W); /* divisions, not reciprocals: torch's rounding */
    for (int64_t b = row_begin; b < row_end; b++) {
        int64_t off = b * L;
        Row r = {a, L, 0, a->next_arrival[b], 0, a->time[b], a->free_nodes[b], a->submit + off, a->run + off,
                 a->requested + off, a->processors_of + off, a->nodes_of + off, a->status + off, a->start + off,
                 a->start_rank + off, 0, running, -1, 0.0};
        /* The next row's jobs into the caches while this one steps: at B = 4096 the rows' columns no
         * longer fit in them, and a row reads its jobs at scattered places (the heap, the window).
         * Its status came two rows ahead, so its first job not ended (next_live) is known here. Written
         * inline: a function of prefetches alone counts as pure, and the compiler drops its calls. */
        if (b + 2 < row_end)
            for (int64_t k = 0; k < a->next_arrival[b + 2]; k += 64) __builtin_prefetch(a->status + off + 2 * L + k);
        if (b + 1 < row_end && !a->done[b + 1]) {
            int64_t next = off + L, next_arrived = a->next_arrival[b + 1];
            int64_t next_live = first_not_ended(a->status + next, 0, next_arrived);
            /* 8 jobs a cache line */
            for (int64_t k = next + (next_live & ~(int64_t)7); k < next + next_arrived; k += 8) {
                __builtin_prefetch(a->submit + k), __builtin_prefetch(a->run + k), __builtin_prefetch(a->requested + k);
                __builtin_prefetch(a->processors_of + k), __builtin_prefetch(a->nodes_of + k);
                __builtin_prefetch(a->start + k), __builtin_prefetch(a->start_rank + k);
            }
        }
        if (a->done[b]) r.first_live = r.next_arrival = L; /* nothing waits: an empty window, skip the scans */
        r.first_live = first_not_ended(r.status, r.first_live, r.next_arrival);
        r.waiting = count_waiting(r.status, r.first_live, r.next_arrival);
        r.started = r.next_arrival - r.waiting; /* every arrived job that is not waiting has started */
        int64_t j = a->job[b];
        if (!a->done[b] && j >= 0) {
            step_row(&r, j, ends);
            a->bsld_sum[b] += r.bsld;
            if (r.waiting == 0 && r.next_arrival == L) a->done[b] = 1;
            a->time[b] = r.time, a->free_nodes[b] = r.free, a->next_arrival[b] = r.next_arrival;
        }
        a->bsld_added[b] = r.bsld;
        /* the filled slots one by one; the empty ones after them (most of a whole-queue window of
         * 1024 slots) as blocks: -1 is all bits set, 0.0f and false all bits clear */
        int64_t filled = build_window(&r, b, window, keys, keys + L, seen);
        int32_t *window_out = a->window_job + b * W;
        for (int64_t i = 0; i < filled; i++) window_out[i] = (int32_t)window[i];
        memset(window_out + filled, 0xff, sizeof(int32_t) * (size_t)(W - filled));
        float *features = a->job_features + b * W * FEATURES;
        uint8_t *mask = a->action_mask + b * W;
        memset(features + filled * FEATURES, 0, sizeof(float) * FEATURES * (size_t)(W - filled));
        memset(mask + filled, 0, (size_t)(W - filled));
        for (int64_t i = 0; i < filled; i++, features += FEATURES) {
            int64_t k = window[i];
            mask[i] = 1;
            features[0] = (float)((double)(r.time - r.submit[k]) / a->max_wait);
            features[1] = (float)((double)r.requested[k] / a->max_requested);
            features[2] = (float)((double)r.processors[k] / (double)a->processors);
            features[3] = r.nodes[k] <= r.free ? 1.0f : 0.0f;
        }
        if (a->done[b]) mask[0] = 1; /* a done row takes (and ignores) slot 0, so a masked draw stays defined */
        a->cluster_features[b * CLUSTER_FEATURES] = (float)((double)r.free / (double)a->nodes);
        a->cluster_features[b * CLUSTER_FEATURES + 1] = (float)(log1p((double)r.waiting) / queue_scale);
        a->queue_length[b] = r.waiting;
        if (a->fit_delay) write_fit_delay(&r, window, filled, W, ends, (int64_t *)keys, a->fit_delay + b * W);
    }
    free(ends), free(keys), free(running), free(seen), free(window);
    return 0;
}

static int queue_rows(const void *args, double unused, int64_t row_begin, int64_t row_end) {
    return lightning_sched_queue_rows((const QueueArgs *)args, unused, row_begin, row_end);
}

/* Every row, spread over threads (native_rows.h). */
int lightning_sched_queue_all(const QueueArgs *a, double unused, int64_t batch, int64_t min_rows) {
    return over_rows(queue_rows, a, unused, batch, min_rows);
}

int lightning_sched_queue_openmp(void) { return built_with_openmp(); }

int64_t lightning_sched_queue_args(void) { return (int64_t)(sizeof(QueueArgs) / sizeof(int64_t)); }
