"""Runs a command as its child and looks at it once a second, as torchrun's agent and many
schedulers do (`--monitor_interval`): a child killed by a signal stays a zombie until the next
look, and this process then ends the same way (killed by that signal, or with its exit code).
It passes no pipe of `dynatrain launch --keep-going` on (DYNATRAIN_LAUNCH_FD is dropped), so the
child's job learns of a killed sibling only from its own looks (job/loss_watch.h).

    python3 lazy_parent.py CMD ARGS..."""
import os
import signal
import subprocess
import sys
import time

env = {k: v for k, v in os.environ.items() if k != "DYNATRAIN_LAUNCH_FD"}
child = subprocess.Popen(sys.argv[1:], env=env)  # close_fds: the pipe's fd stays here
signal.signal(signal.SIGTERM, lambda sig, _: child.send_signal(sig))
while child.poll() is None:
    time.sleep(1)
if child.returncode < 0:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # (the one signal this process handles)
    os.kill(os.getpid(), -child.returncode)
sys.exit(child.returncode)
