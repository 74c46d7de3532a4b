"""The learning pieces: baselines (DeepRM's time-indexed one, which the queue's PPO also takes),
the policy-gradient loss and MAML's adaptation (the queue's inner loop takes its advantages, gradient
scaling and finiteness checks). The LightningModules that drive them are in tasks/; the
queue env's REINFORCE inner loop is lightning_sched/queue/adaptation.py, its PPO tasks/queue_ppo.py."""
