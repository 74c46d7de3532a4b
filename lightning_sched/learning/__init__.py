"""The learning pieces both environments share: baselines (DeepRM's time-indexed one), the
policy-gradient loss and MAML's adaptation. The LightningModules that drive them are in tasks/; the
queue env's REINFORCE inner loop is lightning_sched/queue/adaptation.py, its PPO tasks/queue_ppo.py."""
