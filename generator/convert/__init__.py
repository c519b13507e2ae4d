"""`convert --to v2`: PyTorchJobs (or v1 values) to Kubeflow Trainer v2 TrainJobs, with a report of
every change in meaning. The job is folded to the one pod every v2 node runs, imported to values,
set for v2 where v1's semantics have no counterpart, rendered by the chart's `target: v2` and
checked as `validate --target v2` checks; what v1 did and what v2 will do are read from the job
and from the resolved TrainJob (generator.kinds.trainjob.runtime), never restated."""
