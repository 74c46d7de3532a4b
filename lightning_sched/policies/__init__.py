"""The policies of DeepRM's cluster: the networks (networks: DeepRM's image network and the slot
network), how a network acts (acting) and policies on disk (checkpoints). The queue env's per-job
network is lightning_sched.queue.policy."""
