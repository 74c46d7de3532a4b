/* How the native kernels (deeprm/native_step.c, deeprm/native_image.c, queue/native_queue.c) spread their rows over threads. */
#ifndef LIGHTNING_SCHED_NATIVE_ROWS_H
#define LIGHTNING_SCHED_NATIVE_ROWS_H
#include <stdint.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* A kernel over rows [row_begin, row_end) of a batch: 0, or non-zero when it failed. */
typedef int (*rows_kernel)(const void *args, double scalar, int64_t row_begin, int64_t row_end);

/* Rows 0..batch-1 in chunks of at least min_rows over the OpenMP team of the runtime this library
 * shares with torch (torch ships libgomp.so.1, and the loader reuses a loaded soname), so the rows
 * run on the threads torch's own ops run on instead of competing with them for the cores. Built
 * without OpenMP, one chunk on the calling thread. */
static int over_rows(rows_kernel kernel, const void *args, double scalar, int64_t batch, int64_t min_rows) {
    int failed = 0;
#ifdef _OPENMP
    int64_t chunks = omp_get_max_threads();
    if (min_rows < 1) min_rows = 1;
    if (chunks > batch / min_rows) chunks = batch / min_rows;
    if (chunks < 1) chunks = 1;
#pragma omp parallel for num_threads(chunks) schedule(static) reduction(| : failed)
    for (int64_t c = 0; c < chunks; c++) failed |= kernel(args, scalar, batch * c / chunks, batch * (c + 1) / chunks);
#else
    (void)min_rows;
    failed = kernel(args, scalar, 0, batch);
#endif
    return failed;
}

/* 1 when built with OpenMP: the caller then leaves the splitting to the kernel's *_all entry point. */
static inline int built_with_openmp(void) {
#ifdef _OPENMP
    return 1;
#else
    return 0;
#endif
}
#endif
