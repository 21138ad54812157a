import os

# Tests run on 2 CPU cores; keep XLA from oversubscribing them.
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")
