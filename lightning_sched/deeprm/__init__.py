"""DeepRM's cluster (Mao et al., HotNets 2016): the state of B episodes and its step (cluster, state,
native), rewards and metrics (objectives), the image and slot observations (observations), the
TorchRL env (env), the heuristics and the batched rollout. Beside it, `lightning_sched.queue` is the
job-level batch queue; both share config, jobs, workloads, traces, evaluation and the policies."""
