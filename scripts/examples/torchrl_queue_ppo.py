"""Example: PPO on the job-level queue env with TorchRL's own tools only (not tasks/queue_ppo.py):
a `Collector` over a batched `QueueEnv`, `GAE`, `ClipPPOLoss` and a `ReplayBuffer` of minibatches,
over the library's network (`QueueNetwork`, `make_actor`, `make_critic`). It trains on the first 80%
of the log's jobs, prints the mean bounded slowdown of the episodes that ended in each batch, saves
the network as a queue record and prints the evaluate.py command that tests it on the last 20%.

    python scripts/examples/torchrl_queue_ppo.py --iterations 40 --out /tmp/mine.ckpt --threads 1
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import run_main, set_threads  # noqa: E402
from lightning_sched import ConfigError  # noqa: E402
from lightning_sched.cli import THREADS_HELP, at_least, positive_float, thread_count  # noqa: E402
from lightning_sched.files import refuse_output  # noqa: E402

TRAIN_FRACTION = 0.8  # evaluate.py's heldout protocol tests on the jobs after it
REWARD_SCALE = 100.0  # as the project's trainer: returns of minus hundreds become a few units


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", default="../shared/traces/lublin_256.swf.gz", help="an SWF log")
    parser.add_argument("--iterations", type=at_least(1), default=30, help="collector batches, one PPO update each")
    parser.add_argument("--batch", type=at_least(1), default=64, help="episodes stepped at once (the env's B)")
    parser.add_argument("--frames", type=at_least(1), default=64 * 256,
                        help="decisions a batch holds (a multiple of --batch: T = frames / batch steps a row)")
    parser.add_argument("--sequence_length", type=at_least(2), default=256, help="jobs an episode plays")
    parser.add_argument("--backfill", choices=("off", "easy"), default="off")
    parser.add_argument("--epochs", type=at_least(1), default=4, help="passes over a batch")
    parser.add_argument("--minibatch", type=at_least(1), default=1024, help="decisions an Adam step reads")
    parser.add_argument("--lr", type=positive_float, default=3e-4, help="Adam's step size")
    parser.add_argument("--out", default="runs/torchrl_queue_ppo.ckpt", help="the queue record written at the end")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    parser.add_argument("--seed", type=at_least(0), default=0)
    parser.add_argument("--threads", type=thread_count, default=1, help=THREADS_HELP)
    args = parser.parse_args(argv)
    if args.frames % args.batch:  # the collector would round it, and the line below would lie
        raise ConfigError(f"--frames {args.frames} must be a multiple of --batch {args.batch}")
    refuse_output(args.out, args.overwrite, "--out", args.trace)  # before minutes of training
    set_threads(args.threads)

    import torch
    from torchrl.collectors import Collector
    from torchrl.data import LazyTensorStorage, ReplayBuffer, SamplerWithoutReplacement
    from torchrl.envs import ExcludeTransform, TransformedEnv
    from torchrl.objectives import ClipPPOLoss
    from torchrl.objectives.value import GAE

    from lightning_sched.queue.config import SEQUENCE_KEYS
    from lightning_sched.queue.env import QueueEnv
    from lightning_sched.queue.log import read_queue_log
    from lightning_sched.queue.policy import QueueNetwork, QueuePolicyRecord, make_actor, make_critic

    torch.manual_seed(args.seed)  # the network's initial weights and the actor's draws
    log = read_queue_log(args.trace)
    cfg = log.config(sequence_length=args.sequence_length, backfill=args.backfill)
    # sequences start anywhere that keeps all of their jobs in the first 80%
    train = log.positions(0, log.jobs_before(TRAIN_FRACTION), args.sequence_length)
    queue = QueueEnv(cfg, log, batch_size=[args.batch], positions=train, seed=args.seed, episode_results=True)
    # the [B, L] sequences are for the rules: the network reads the window only, and the collector
    # would copy them into every step it keeps
    env = TransformedEnv(queue, ExcludeTransform(*SEQUENCE_KEYS))

    net = QueueNetwork()  # RLScheduler's kernel network: one scorer for every visible job, and a critic
    actor, critic = make_actor(net), make_critic(net)  # MaskedCategorical over "action_mask"; [B, 1] values
    # the actor reads no "is_init": no InitTracker for the collector to add (it warns of it otherwise)
    collector = Collector(env, actor, frames_per_batch=args.frames, total_frames=args.frames * args.iterations,
                          auto_register_policy_transforms=False)
    gae = GAE(gamma=1.0, lmbda=0.97, value_network=critic)  # RLScheduler's: the return is minus the bsld
    loss = ClipPPOLoss(actor, critic, clip_epsilon=0.2, entropy_coeff=0.0, normalize_advantage=True)
    loss.set_keys(sample_log_prob="action_log_prob")  # make_actor's name (the default from TorchRL 0.14 on)
    optimizer = torch.optim.Adam(loss.parameters(), lr=args.lr)
    buffer = ReplayBuffer(storage=LazyTensorStorage(args.frames), sampler=SamplerWithoutReplacement(),
                          batch_size=args.minibatch)
    initial = {k: v.clone() for k, v in net.state_dict().items()}

    print(f"{Path(args.trace).name}: {log.num_jobs} jobs, training sequences start in jobs [{train[0]}, {train[1]}]; "
          f"B={args.batch}, T={args.frames // args.batch} steps a batch, L={args.sequence_length}, "
          f"backfill {args.backfill}", flush=True)
    start = time.perf_counter()
    for iteration, batch in enumerate(collector, 1):  # batch: [B, T], rows reset as their episodes end
        ended = batch["next", "episode", "mean_bounded_slowdown"]  # [B, T, 1]: NaN but where an episode ended
        ended = ended[~ended.isnan()]
        batch["next", "reward"] = batch["next", "reward"] / REWARD_SCALE
        with torch.no_grad():
            gae(batch)  # "advantage", "value_target" [B, T, 1]; the critic runs under torch.vmap
        buffer.extend(batch.reshape(-1))  # [B * T] decisions (the storage holds one batch: it is replaced)
        for _ in range(args.epochs):
            for minibatch in buffer:  # without replacement: one pass is every decision once
                parts = loss(minibatch)
                total = parts["loss_objective"] + parts["loss_critic"] + parts.get("loss_entropy", 0.0)
                optimizer.zero_grad()
                total.backward()
                torch.nn.utils.clip_grad_norm_(loss.parameters(), 1.0)
                optimizer.step()
        shown = f"{ended.mean():9.1f} over {ended.numel():3d} episodes" if ended.numel() else "no episode ended"
        # the last minibatch's entropy (nats; log 128 = 4.85 is uniform over a full window) and TorchRL's sample
        # estimate of the KL to the batch's policy (kl_approx: it can come out slightly negative)
        print(f"iteration {iteration:3d}: mean bounded slowdown {shown}; entropy {float(parts['entropy']):.2f}, "
              f"KL {float(parts['kl_approx']):.4f}, {time.perf_counter() - start:4.0f} s", flush=True)
    collector.shutdown()

    changed = sum(float((v - initial[k]).abs().sum()) for k, v in net.state_dict().items())
    out = QueuePolicyRecord.of(net, cfg, log=log.path, train_fraction=TRAIN_FRACTION).save(args.out, args.overwrite)
    print(f"saved {out} (weights moved {changed:.3g} in sum of absolute changes); test it on the held-out 20%:")
    print(f"python scripts/evaluate.py --env queue --protocol heldout --trace {args.trace} --backfill {args.backfill} "
          f"--policy fcfs sjf f1 {out} --threads 1")


if __name__ == "__main__":
    run_main(main)
