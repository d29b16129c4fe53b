"""What runs on the engines, apart from the code that starts and drives them: the
entry point (``python -m dpnb.cluster.engine``, in ``start``), the calls the notebook
makes there and the progress reports sent back (``calls``), training state commits
(``training_state``), brief communicator tracebacks (``brief_errors``) and stack dumps
on request (``stack_dumps``).  Nothing here imports the control side of ``dpnb.cluster``."""
