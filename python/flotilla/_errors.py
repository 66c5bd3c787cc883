"""The exceptions of the flotilla package.  Each carries the message of the
Flotilla program that refused (the importer, the job loader, the launcher),
so nothing is said twice and nothing is guessed in Python."""


class FlotillaError(RuntimeError):
    """Base of every error raised by the flotilla package.

    `output` holds the end of the program's output (or "" when none ran)."""

    def __init__(self, message, output=""):
        super().__init__(message)
        self.output = output


class ExportError(FlotillaError):
    """flotilla-trainer's importer refused the exported ONNX file."""


class JobError(FlotillaError):
    """The job cannot be written or flotilla-trainer refused it (nothing ran)."""


class RunError(FlotillaError):
    """The training run failed; `returncode` and `log_dir` say where to look."""

    def __init__(self, message, output="", returncode=None, log_dir=None):
        super().__init__(message, output)
        self.returncode = returncode
        self.log_dir = log_dir


class LoadError(FlotillaError):
    """A trained ONNX file does not fit the module (a missing name, a shape)."""
