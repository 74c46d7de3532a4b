"""The per-job policy of the queue env (docs/hpc_queue.md): one small network scores every visible
waiting job with the same weights, so any window size and any cluster size work (the slot
network's idea at job granularity, as RLScheduler's kernel network). A value head for PPO, the
TorchRL actor and critic built on them, greedy acting, and checkpoints readable without training code.

The network reads the env's observation keys (docs/hpc_queue.md, "The library"):

    job_features:     FloatTensor[B, W, F]  per slot: wait, requested, processors, fits now (0: empty),
                      and the slot's rank under each rule of QueuePolicySpec.rule_ranks (R of them),
                      and with QueuePolicySpec.fit_delay how long until the job would fit
                      (F = 4 + R + fit_delay: QueueConfig.job_features)
    cluster_features: FloatTensor[B, 2 (+2)] free nodes share, log queue length (and with
                      QueuePolicySpec.clock the time of day, sin and cos)
    action_mask:      BoolTensor[B, W]      the slot holds a job
"""
from .acting import IN_KEYS, QueuePolicy, choose, log_prob, make_actor, make_critic, network_inputs, reserved_action
from .checkpoints import (
    CHECKPOINT_KEY,
    QueuePolicyRecord,
    ensemble_record,
    load_queue_policy,
    queue_network,
    read_queue_record,
)
from .networks import QueueNetwork, job_inputs
from .spec import QueuePolicySpec

__all__ = ["CHECKPOINT_KEY", "IN_KEYS", "QueueNetwork", "QueuePolicy", "QueuePolicyRecord",
           "QueuePolicySpec", "choose", "ensemble_record", "job_inputs", "load_queue_policy", "log_prob", "make_actor",
           "make_critic", "network_inputs", "queue_network", "read_queue_record", "reserved_action"]
