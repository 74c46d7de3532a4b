"""The command-line scripts. In the checkout each runs as a file (`python scripts/fit.py ...`); an
installed wheel has them as lightning_sched.scripts and runs them through console.py's commands."""
