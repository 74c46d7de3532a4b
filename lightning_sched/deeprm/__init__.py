"""DeepRM's cluster (Mao et al., HotNets 2016): the state of B episodes and its step (cluster, state,
native), rewards and metrics (objectives), the image and slot observations (observations), the
TorchRL env (env), the heuristics and the batched rollout. Its workloads, jobsets, heuristics,
policies and evaluation are the top-level modules of the same names (`lightning_sched.workloads`,
`.jobs`, `.heuristics`, `.policies`, `.evaluation`). Beside it, `lightning_sched.queue` is the
job-level batch queue, with its own; the two share the config errors, the trace reader
(`traces.files`), the confidence intervals (`evaluation.mean_ci95`), the batched-env helpers
(`batched`), the native build and the learning pieces (`learning`)."""
