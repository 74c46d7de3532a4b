/* cluster.step_state for rows [row_begin, row_end) of a batch, one row at a time (native.py builds,
 * loads and calls it; the torch code in cluster.py is the definition it matches bit for bit).
 *
 * Both layouts of state.py: unary, plane u of resource r, bit k: used[k][r] >= u, P = U + 2 planes
 * (U <= 62); binary, plane s, bit k: bit s of used[k][r], P = U.bit_length() planes; each plane W
 * words, row k at bit k % n of word k / n (n = 31 for int32 words, 63 for int64; the sign bit stays
 * clear). The binary layout is told apart by P != U + 2.
 * The kernel reads the state through the pointers of `StepArgs` and writes the fields the torch step
 * replaces into fresh arrays (`*_out`), and mutates in place only the ones it mutates in place
 * (start, job_start, pending_due, finish_count, finish_weight): observations alias the others.
 * It also writes four observation keys of the new state (`KEYS` of native.py), values it has at hand.
 * Rewards are computed in double with the torch step's operations in its order, so they agree exactly
 * (built with -ffp-contract=off: a fused multiply-add would round differently).
 */
#include <stdint.h>
#include <stdlib.h>

#include "../native_rows.h"

enum { SLOWDOWN, COMPLETION_TIME, MAKESPAN, UTILIZATION, DEADLINE }; /* the order of config.OBJECTIVES */
#define NEVER (((int64_t)1) << 40) /* state.NEVER */

/* Every field is 8 bytes, in the order of native.py's SIZES, READ, IN_PLACE, REPLACED, the reward,
 * then KEYS. */
typedef struct {
    int64_t batch, max_jobs, num_slots, num_resources, num_planes, num_words, horizon, word_bytes,
        resource_units, max_time, objective, pending_width, max_track_since_new;
    /* read only */
    const int64_t *order, *arrival;
    const int32_t *duration, *demand;
    const int64_t *deadline;
    const double *arrived_weight;
    const int64_t *num_jobs, *action;
    const int64_t *time, *num_arrived, *queue_head, *slot_job;
    const int32_t *slot_duration, *slot_demand;
    const int64_t *slot_offset;
    const void *used_bits;
    const int64_t *finished_count;
    const double *finished_weight, *util_sum;
    const uint8_t *terminated, *truncated;
    /* mutated in place */
    int64_t *start, *job_start, *pending_due, *finish_count;
    double *finish_weight;
    /* fresh outputs */
    int64_t *time_out, *num_arrived_out, *queue_head_out, *slot_job_out;
    int32_t *slot_duration_out, *slot_demand_out;
    int64_t *slot_offset_out;
    void *used_bits_out;
    int64_t *finished_count_out;
    double *finished_weight_out, *util_sum_out;
    uint8_t *terminated_out, *truncated_out;
    float *reward_out;
    /* observation keys of the new state (observations.py defines them), fresh as well */
    uint8_t *action_mask_out;
    int64_t *slot_deadline_out, *free_now_out;
    float *since_new_out;
} StepArgs;

/* First row >= pos whose bit is set (want = 1) or clear (want = 0), W * n when none; bits past
 * the horizon are clear in `words`. */
static int64_t next_row(const uint64_t *words, int64_t num_words, int n, int64_t pos, int want) {
    const uint64_t full = (((uint64_t)1) << n) - 1;
    int64_t w = pos / n;
    int bit = (int)(pos % n);
    for (; w < num_words; w++, bit = 0) {
        uint64_t x = (want ? words[w] : ~words[w]) & full & (full << bit);
        if (x) return w * n + __builtin_ctzll(x);
    }
    return num_words * n;
}

/* Earliest k with rows k .. k+d-1 all set (they end before the horizon: later bits are clear), -1 if none. */
static int64_t earliest_run(const uint64_t *fits, int64_t num_words, int n, int64_t d, int64_t horizon) {
    int64_t pos = 0;
    while (pos + d <= horizon) {
        int64_t first = next_row(fits, num_words, n, pos, 1);
        if (first + d > horizon) return -1;
        int64_t end = next_row(fits, num_words, n, first, 0);
        if (end - first >= d) return first;
        pos = end + 1;
    }
    return -1;
}

/* used[0][r] of resource r's planes (P planes of W words). */
static int64_t used_at_row0(const uint64_t *planes, int64_t P, int64_t W, int binary) {
    int64_t used = 0;
    if (binary) {
        for (int64_t s = 0; s < P; s++) used += (int64_t)(planes[s * W] & 1) << s;
    } else {
        for (int64_t u = 0; u < P; u++) used += (int64_t)(planes[u * W] & 1);
        used -= 1; /* level 0 is always set */
    }
    return used;
}

/* Binary layout: the rows of word w where used[k][r] <= limit, comparing digit by digit from the
 * top (cluster.at_most): `below` once the first differing digit is 0 in the count and 1 in the
 * limit, `equal` while none has differed. */
static uint64_t at_most(const uint64_t *planes, int64_t P, int64_t W, int64_t w, int64_t limit) {
    uint64_t below = 0, equal = ~(uint64_t)0;
    for (int64_t s = P - 1; s >= 0; s--) {
        const uint64_t bit = ((limit >> s) & 1) ? ~(uint64_t)0 : 0;
        const uint64_t differ = (planes[s * W + w] ^ bit) & equal;
        below |= differ & bit;
        equal ^= differ;
    }
    return below | equal;
}

/* used[k][r] + q on the rows set in `rows` (W words), one resource's P planes (cluster.add_demand). */
static void add_demand(uint64_t *planes, int64_t P, int64_t W, const uint64_t *rows, int64_t q, int binary) {
    if (binary) { /* q added to the count of every row of the job's, with a ripple carry */
        for (int64_t w = 0; w < W; w++) {
            uint64_t carry = 0;
            for (int64_t s = 0; s < P; s++) {
                const uint64_t add = ((q >> s) & 1) ? rows[w] : 0, digit = planes[s * W + w];
                const uint64_t odd = digit ^ add;
                planes[s * W + w] = odd ^ carry;
                carry = (digit & add) | (carry & odd);
            }
        }
        return;
    }
    /* level u inside the job's rows was level u - q before (levels are nested, so OR-ing suffices);
     * from the top down, so every source is still the old level */
    for (int64_t u = P - 1; u >= 1 && q > 0; u--) {
        const int64_t source = u - q < 0 ? 0 : u - q;
        for (int64_t w = 0; w < W; w++) planes[u * W + w] |= planes[source * W + w] & rows[w];
    }
}

/* The rows where a job of demand q[r * stride] fits on every resource (cluster.fitting_rows) into
 * `fits` (W words, clear past the horizon); 0 when a demand is outside the level planes. */
static int fitting_rows(const uint64_t *cur, int64_t R, int64_t P, int64_t W, int64_t U, const int32_t *q,
                        int64_t stride, const uint64_t *horizon_mask, int binary, uint64_t *fits) {
    for (int64_t w = 0; w < W; w++) fits[w] = horizon_mask[w];
    for (int64_t r = 0; r < R; r++) {
        const uint64_t *planes = cur + r * P * W;
        if (binary) { /* rows where used[k][r] <= U - q */
            for (int64_t w = 0; w < W; w++) fits[w] &= at_most(planes, P, W, w, U - q[r * stride]);
            continue;
        }
        const int64_t level = U + 1 - q[r * stride]; /* too full where used >= U + 1 - q */
        if (level < 1 || level >= P) return 0;
        for (int64_t w = 0; w < W; w++) fits[w] &= ~planes[level * W + w];
    }
    return 1;
}

/* Row k + 1 moved to row k in each of `count` planes of W words of n rows (cluster.shift_rows). */
static void shift_one_row(uint64_t *planes, int64_t count, int64_t W, int n) {
    for (int64_t p = 0; p < count; p++) {
        uint64_t *plane = planes + p * W;
        for (int64_t w = 0; w < W; w++) plane[w] = (plane[w] >> 1) | (w + 1 < W ? (plane[w + 1] & 1) << (n - 1) : 0);
    }
}

/* Row b's reward for [time, time + 1), before time advances (objectives.interval_reward): the
 * objective's, less tardiness_weight per job in the system past its deadline. In double, with the
 * torch step's operations in its order. */
static double interval_reward(const StepArgs *a, int64_t b, int64_t time, double utilization,
                              double tardiness_weight) {
    const int64_t L = a->max_jobs, jobs = L + 1;
    double reward;
    switch (a->objective) {
    case SLOWDOWN:
        reward = -(a->arrived_weight[b * jobs + a->num_arrived[b]] - a->finished_weight[b]);
        break;
    case COMPLETION_TIME:
        reward = -(double)(a->num_arrived[b] - a->finished_count[b]);
        break;
    case MAKESPAN:
        reward = -1.0;
        break;
    case UTILIZATION:
        reward = utilization;
        break;
    default: { /* DEADLINE: jobs due at t+1 not scheduled to finish by then */
        const int64_t due = time + 1 > a->max_time + 1 ? a->max_time + 1 : time + 1;
        reward = -(double)a->pending_due[b * a->pending_width + due];
    }
    }
    if (tardiness_weight != 0.0) { /* jobs in the system past their deadline: deadline <= t < finish */
        const int64_t *start = a->start + b * jobs, *deadline = a->deadline + b * jobs;
        const int32_t *duration = a->duration + b * jobs;
        int64_t late = 0;
        for (int64_t j = 0; j < L; j++) {
            if (deadline[j] > time) continue;
            const int64_t finish = start[j] >= 0 ? start[j] + duration[j] : NEVER;
            late += finish > time;
        }
        reward = reward - tardiness_weight * (double)late;
    }
    return reward;
}

/* Beyond the L3 cache (B of 16384 at DeepRM's size) every line a row touches is a wait on memory, and
 * a row touches some 40 arrays, more streams than the hardware prefetcher follows: each row asks for
 * its lines some rows ahead, in three stages, each reading only what an earlier stage brought in.
 * The stages are inlined: a function of prefetches alone counts as pure, and the compiler drops its
 * calls silently (tests/test_native_step.py checks that the built kernel keeps them). */
#define PREFETCH static inline __attribute__((always_inline)) void

PREFETCH prefetch_span(const void *at, int64_t bytes, int write) {
    for (int64_t i = 0; i < bytes; i += 64) {
        if (write) __builtin_prefetch((const char *)at + i, 1);
        else __builtin_prefetch((const char *)at + i);
    }
}

/* Stage 1: row b's entries of the per-row fields it reads and of the fresh ones it writes. */
PREFETCH prefetch_fields(const StepArgs *a, int64_t b) {
    const int64_t M = a->num_slots, R = a->num_resources;
    const int64_t words = R * a->num_planes * a->num_words * a->word_bytes;
    const struct { const void *at; int64_t bytes; } read[] = {
        {a->action + b, 8}, {a->time + b, 8}, {a->num_arrived + b, 8}, {a->queue_head + b, 8}, {a->num_jobs + b, 8},
        {a->slot_job + b * M, 8 * M}, {a->slot_duration + b * M, 4 * M}, {a->slot_demand + b * R * M, 4 * R * M},
        {a->slot_offset + b * M, 8 * M}, {(const char *)a->used_bits + b * words, words},
        {a->finished_count + b, 8}, {a->finished_weight + b, 8}, {a->util_sum + b, 8}, {a->terminated + b, 1},
        {a->truncated + b, 1}}, written[] = {
        {a->time_out + b, 8}, {a->num_arrived_out + b, 8}, {a->queue_head_out + b, 8}, {a->slot_job_out + b * M, 8 * M},
        {a->slot_duration_out + b * M, 4 * M}, {a->slot_demand_out + b * R * M, 4 * R * M},
        {a->slot_offset_out + b * M, 8 * M}, {(const char *)a->used_bits_out + b * words, words},
        {a->finished_count_out + b, 8}, {a->finished_weight_out + b, 8}, {a->util_sum_out + b, 8},
        {a->terminated_out + b, 1}, {a->truncated_out + b, 1}, {a->reward_out + b, 4},
        {a->action_mask_out + b * (M + 1), M + 1}, {a->slot_deadline_out + b * M, 8 * M},
        {a->free_now_out + b * R, 8 * R}, {a->since_new_out + b, 4}};
    for (size_t i = 0; i < sizeof(read) / sizeof(read[0]); i++) prefetch_span(read[i].at, read[i].bytes, 0);
    for (size_t i = 0; i < sizeof(written) / sizeof(written[0]); i++) prefetch_span(written[i].at, written[i].bytes, 1);
}

/* Stage 2: the job entries row b reads at scattered places, found from stage 1's fields. */
PREFETCH prefetch_jobs(const StepArgs *a, int64_t b) {
    const int64_t jobs = a->max_jobs + 1, M = a->num_slots, R = a->num_resources, T = a->horizon;
    const int64_t *slot_job = a->slot_job + b * M;
    const int64_t action = a->action[b], slot = action < 0 ? 0 : (action > M - 1 ? M - 1 : action);
    const int64_t arrived = a->num_arrived[b], head = a->queue_head[b] < jobs ? a->queue_head[b] : jobs - 1;
    const int64_t *finish_count = a->finish_count + b * (T + 1), time = a->time[b];
    const double *finish_weight = a->finish_weight + b * (T + 1);
    if (action == slot) { /* scheduling, if the job fits: its entries and its finish time's */
        const int64_t finish_at = (time + a->slot_offset[b * M + slot] + a->slot_duration[b * M + slot]) % (T + 1);
        __builtin_prefetch(a->order + b * jobs + slot_job[slot]);
        __builtin_prefetch(a->start + b * jobs + slot_job[slot], 1);
        __builtin_prefetch(finish_count + (finish_at < 0 ? 0 : finish_at), 1);
        __builtin_prefetch(finish_weight + (finish_at < 0 ? 0 : finish_at), 1);
    }
    __builtin_prefetch(finish_count + (time + 1) % (T + 1), 1); /* the ring slot an advance reads */
    __builtin_prefetch(finish_weight + (time + 1) % (T + 1), 1);
    for (int64_t m = 0; m < M && slot_job[m] < a->max_jobs; m++) __builtin_prefetch(a->deadline + b * jobs + slot_job[m]);
    /* jobs entering the slots come from the queue's head */
    __builtin_prefetch(a->duration + b * jobs + head);
    __builtin_prefetch(a->deadline + b * jobs + head);
    for (int64_t r = 0; r < R; r++) __builtin_prefetch(a->demand + (b * R + r) * jobs + head);
    __builtin_prefetch(a->arrival + b * jobs + (arrived > 0 ? arrived - 1 : 0));
    __builtin_prefetch(a->arrival + b * jobs + arrived);
    __builtin_prefetch(a->arrived_weight + b * jobs + arrived);
}

/* Stage 3: the chosen job's entry in jobset order, found from stage 2's order. */
PREFETCH prefetch_job_start(const StepArgs *a, int64_t b) {
    const int64_t jobs = a->max_jobs + 1, M = a->num_slots, action = a->action[b];
    if (action >= 0 && action < M) __builtin_prefetch(a->job_start + b * jobs + a->order[b * jobs + a->slot_job[b * M + action]], 1);
}

/* rows ahead of each stage: enough to cover a wait on memory with the work of the rows between */
enum { FIELDS_AHEAD = 24, JOBS_AHEAD = 12, JOB_START_AHEAD = 4 };

int lightning_sched_step_rows(const StepArgs *a, double tardiness_weight, int64_t row_begin, int64_t row_end) {
    const int64_t L = a->max_jobs, M = a->num_slots, R = a->num_resources, P = a->num_planes,
                  W = a->num_words, T = a->horizon, U = a->resource_units, jobs = L + 1;
    const int n = a->word_bytes == 4 ? 31 : 63, binary = P != U + 2;
    const int64_t planes_words = R * P * W;
    uint64_t *cur = malloc(sizeof(uint64_t) * (size_t)(planes_words + 3 * W) + sizeof(int64_t) * (size_t)(2 * M));
    if (!cur) return 1;
    uint64_t *horizon_mask = cur + planes_words, *rows = horizon_mask + W, *fits = rows + W;
    int64_t *slots = (int64_t *)(fits + W), *slots_from = slots + M;
    for (int64_t w = 0; w < W; w++) {
        int64_t high = T - w * n;
        high = high < 0 ? 0 : (high > n ? n : high);
        horizon_mask[w] = (((uint64_t)1) << high) - 1;
    }

    for (int64_t b = row_begin; b < row_end; b++) {
        if (b + FIELDS_AHEAD < row_end) prefetch_fields(a, b + FIELDS_AHEAD);
        if (b + JOBS_AHEAD < row_end) prefetch_jobs(a, b + JOBS_AHEAD);
        if (b + JOB_START_AHEAD < row_end) prefetch_job_start(a, b + JOB_START_AHEAD);
        const int64_t *order = a->order + b * jobs, *arrival = a->arrival + b * jobs, *deadline = a->deadline + b * jobs;
        const int32_t *duration = a->duration + b * jobs, *demand = a->demand + b * R * jobs;
        const int64_t *slot_job = a->slot_job + b * M;
        const int32_t *slot_duration = a->slot_duration + b * M, *slot_demand = a->slot_demand + b * R * M;
        int64_t *start = a->start + b * jobs, *job_start = a->job_start + b * jobs;
        int64_t *finish_count = a->finish_count + b * (T + 1);
        double *finish_weight = a->finish_weight + b * (T + 1);
        if (a->word_bytes == 4) {
            const int32_t *in = (const int32_t *)a->used_bits + b * planes_words;
            for (int64_t i = 0; i < planes_words; i++) cur[i] = (uint32_t)in[i];
        } else {
            const int64_t *in = (const int64_t *)a->used_bits + b * planes_words;
            for (int64_t i = 0; i < planes_words; i++) cur[i] = (uint64_t)in[i];
        }

        /* --- schedule the slot's job at its earliest offset; time stays frozen --- */
        const int64_t time = a->time[b], action = a->action[b];
        const int active = !(a->terminated[b] | a->truncated[b]);
        const int64_t slot = action < 0 ? 0 : (action > M - 1 ? M - 1 : action);
        int64_t offset = a->slot_offset[b * M + slot];
        const int schedule = active && action >= 0 && action < M && offset >= 0;
        const int advance = active && !schedule;
        const int64_t job = schedule ? slot_job[slot] : L;
        const int64_t job_duration = schedule ? slot_duration[slot] : 0;
        if (offset < 0) offset = 0;
        const int64_t job_begin = time + offset;
        if (schedule) { /* else the torch step writes -1 over the sentinel's -1 and adds 0: nothing to touch */
            start[job] = job_begin;
            job_start[order[job]] = job_begin;
            if (a->objective == DEADLINE) { /* a job that will finish by its deadline no longer counts as pending */
                const int64_t due = deadline[job];
                const int64_t column = due < 0 ? 0 : (due > a->max_time + 1 ? a->max_time + 1 : due);
                a->pending_due[b * a->pending_width + column] -= job_begin + job_duration <= due;
            }
            for (int64_t w = 0; w < W; w++) {
                int64_t low = offset - w * n, high = offset + job_duration - w * n;
                low = low < 0 ? 0 : (low > n ? n : low);
                high = high < 0 ? 0 : (high > n ? n : high);
                rows[w] = ((((uint64_t)1) << high) - 1) ^ ((((uint64_t)1) << low) - 1);
            }
            for (int64_t r = 0; r < R; r++) add_demand(cur + r * P * W, P, W, rows, slot_demand[r * M + slot], binary);
            const int64_t finish_at = (job_begin + job_duration) % (T + 1);
            finish_count[finish_at] += 1;
            finish_weight[finish_at] += 1.0 / (double)(job_duration < 1 ? 1 : job_duration);
        }
        for (int64_t m = 0; m < M; m++) { /* slots behind the taken one move up */
            const int64_t from = m + (schedule && m >= slot);
            slots[m] = from < M ? slot_job[from] : L;
            slots_from[m] = from;
        }

        /* --- advance time by one step: pay the interval's reward, shift the horizon --- */
        double reward = 0.0, utilization = 0.0;
        if (advance) {
            int64_t used = 0; /* used[0][r] summed over r */
            for (int64_t r = 0; r < R; r++) used += used_at_row0(cur + r * P * W, P, W, binary);
            utilization = (double)used / (double)R / (double)U;
            reward = interval_reward(a, b, time, utilization, tardiness_weight);
        }
        a->reward_out[b] = (float)reward;
        a->util_sum_out[b] = a->util_sum[b] + (advance ? utilization : 0.0);
        const int64_t now = time + advance;
        a->time_out[b] = now;
        if (advance) shift_one_row(cur, R * P, W, n);
        for (int64_t r = 0; r < R; r++) {
            if (!binary) /* level 0 holds in every row, the empty one entering too */
                for (int64_t w = 0; w < W; w++) cur[r * P * W + w] = horizon_mask[w];
            a->free_now_out[b * R + r] = U - used_at_row0(cur + r * P * W, P, W, binary);
        }
        if (a->word_bytes == 4) {
            int32_t *out = (int32_t *)a->used_bits_out + b * planes_words;
            for (int64_t i = 0; i < planes_words; i++) out[i] = (int32_t)cur[i];
        } else {
            int64_t *out = (int64_t *)a->used_bits_out + b * planes_words;
            for (int64_t i = 0; i < planes_words; i++) out[i] = (int64_t)cur[i];
        }
        const int64_t ring = now % (T + 1);
        const int64_t now_finished = finish_count[ring] * advance;
        const double now_weight = finish_weight[ring] * (double)advance;
        const int64_t finished = a->finished_count[b] + now_finished;
        a->finished_count_out[b] = finished;
        a->finished_weight_out[b] = a->finished_weight[b] + now_weight;
        finish_count[ring] += -now_finished; /* empty the ring slot just read */
        finish_weight[ring] += -now_weight;
        /* sorted jobs with arrival <= now: a walk from the count before, which is exact on sorted
         * arrivals from any start and usually moves by the step's few arrivals */
        int64_t arrived = a->num_arrived[b];
        arrived = arrived < 0 ? 0 : (arrived > jobs ? jobs : arrived);
        while (arrived > 0 && arrival[arrived - 1] > now) arrived--;
        while (arrived < jobs && arrival[arrived] <= now) arrived++;
        a->num_arrived_out[b] = arrived;
        const int64_t cap = a->max_track_since_new, since = now - arrival[arrived > 0 ? arrived - 1 : 0];
        /* in double, then rounded to float: observations.divide_exactly's value */
        a->since_new_out[b] = (float)((double)(arrived > 0 ? (since > cap ? cap : since) : cap) / (double)cap);
        const int terminated = advance && finished == a->num_jobs[b];
        a->truncated_out[b] = a->truncated[b] | (advance && !terminated && now >= a->max_time);
        a->terminated_out[b] = a->terminated[b] | terminated;

        /* --- jobs from the front of the backlog into the empty slots at the end; the slots' jobs'
         * attributes and earliest offsets --- */
        int64_t filled = 0, taken = 0;
        for (int64_t m = 0; m < M; m++) filled += slots[m] < L;
        const int64_t head = a->queue_head[b];
        int64_t *slot_job_out = a->slot_job_out + b * M, *slot_offset_out = a->slot_offset_out + b * M;
        int32_t *slot_duration_out = a->slot_duration_out + b * M, *slot_demand_out = a->slot_demand_out + b * R * M;
        for (int64_t m = 0; m < M; m++) {
            int64_t j = slots[m], from = slots_from[m];
            if (m >= filled) {
                from = M; /* a job new to the slots, or none */
                const int64_t candidate = head + (m - filled);
                const int take = candidate < arrived;
                j = take ? candidate : L;
                taken += take;
            }
            slot_job_out[m] = j;
            /* a job that stays in the slots keeps its attributes, and the sentinel's are init_state's
             * constants: only a job new to the slots is read from the job columns, whose rows beyond
             * the cache cost a wait on memory each */
            const int empty = j == L, kept = !empty && from < M;
            const int32_t d = empty ? 0 : (kept ? slot_duration[from] : duration[j]);
            slot_duration_out[m] = d;
            for (int64_t r = 0; r < R; r++)
                slot_demand_out[r * M + m] = empty ? 0 : (kept ? slot_demand[r * M + from] : demand[r * jobs + j]);
            int64_t found = -1;
            if (d > 0 && fitting_rows(cur, R, P, W, U, slot_demand_out + m, M, horizon_mask, binary, fits))
                found = earliest_run(fits, W, n, d, T);
            slot_offset_out[m] = found;
            a->action_mask_out[b * (M + 1) + m] = found >= 0;
            a->slot_deadline_out[b * M + m] = (empty ? NEVER : deadline[j]) - now;
        }
        a->action_mask_out[b * (M + 1) + M] = 1; /* void is always valid */
        a->queue_head_out[b] = head + taken;
    }
    free(cur);
    return 0;
}

/* 8-byte fields of StepArgs: native.py checks its argument array against it */
int64_t lightning_sched_step_args(void) { return (int64_t)(sizeof(StepArgs) / 8); }

static int step_rows(const void *args, double tardiness_weight, int64_t row_begin, int64_t row_end) {
    return lightning_sched_step_rows((const StepArgs *)args, tardiness_weight, row_begin, row_end);
}

/* Every row, spread over threads (native_rows.h). */
int lightning_sched_step_all(const StepArgs *a, double tardiness_weight, int64_t batch, int64_t min_rows) {
    return over_rows(step_rows, a, tardiness_weight, batch, min_rows);
}

int lightning_sched_openmp(void) { return built_with_openmp(); }
