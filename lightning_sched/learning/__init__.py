"""Learning policies for DeepRM's cluster: baselines, the policy-gradient loss and MAML's adaptation
(the LightningModules that drive them are in tasks/; the queue env's PPO is tasks/queue_ppo.py)."""
