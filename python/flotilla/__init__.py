"""flotilla: train a PyTorch module with Flotilla from Python.

A thin front door to what the README does by hand: nothing is computed
here; the programs (flotilla-trainer, flotilla-run) are found in
FLOTILLA_BINDIR, the installed bindir or PATH, and their refusals are
raised as exceptions carrying their messages.

    import flotilla
    flotilla.export(net, torch.zeros(2, 784), "net.onnx")
    job = flotilla.Job(model="net.onnx", data=dict(x=x, y=y, test_x=xt, test_y=yt),
                       optimizer=dict(name="momentum", lr=0.1), train=dict(epochs=3))
    metrics = job.run(nproc_per_node=2)          # {"test_acc1": ..., ...}
    flotilla.load_trained(net, job.trained_path)
"""
from ._errors import ExportError, FlotillaError, JobError, LoadError, RunError
from ._export import check_model, export
from ._job import Job
from ._load import load_trained

for _cls in (FlotillaError, ExportError, JobError, RunError, LoadError):
    _cls.__module__ = __name__  # shown as flotilla.RunError, where users find them

__all__ = ["export", "check_model", "Job", "load_trained", "FlotillaError", "ExportError",
           "JobError", "RunError", "LoadError"]
