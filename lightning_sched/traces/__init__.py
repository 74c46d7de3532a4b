"""Real job traces as workloads: a log file parsed, mapped onto a virtual cluster and cut into `JobSet` windows.

Data flows one way through the modules:

    files      an SWF or CSV file -> `Trace`, the jobs as recorded (read_swf, read_csv, read_trace; TraceError)
    mapping    a Trace onto a cluster: resources, capacities, which jobs are kept (JobRules), their steps and
               units (JobSizing), arrival steps, load, time compression, the train/test split
    windows    where a split's windows of simu_len steps can start (WindowPlan)
    replay     the recorded schedule, to start a window as the log was (LogState)
    proposal   a cluster at the log's own resolution (propose_cluster -> ClusterProposal)
    workload   TraceWorkload (the workload protocol) and TraceReport (what the mapping did)
    synthesis  a synthetic SWF log with a memory column and a feasible schedule (write_swf), for tests

A script reads the log, proposes a cluster and builds its workloads in that order (`lightning_sched.cli`
parses the flags); `read_trace` parses a file once per file version, so the proposal and every workload
of one log share one `Trace`.
"""
from .files import SWF_FIELDS, SWF_RESOURCES, Trace, TraceError, read_csv, read_swf, read_trace, trace_format
from .mapping import CLIP_REASONS, DROP_REASONS, JobRules, JobSizing, TraceWarning
from .proposal import ClusterProposal, propose_cluster
from .replay import fit_running
from .workload import TraceReport, TraceWorkload

__all__ = ["CLIP_REASONS", "DROP_REASONS", "SWF_FIELDS", "SWF_RESOURCES", "ClusterProposal", "JobRules", "JobSizing",
           "Trace", "TraceError", "TraceReport", "TraceWarning", "TraceWorkload", "fit_running", "propose_cluster",
           "read_csv", "read_swf", "read_trace", "trace_format"]
