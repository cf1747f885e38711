"""Running a search's trials: ``--workers`` threads, each asking the study for a trial and training it in a process of
its own (``worker``), until the study holds ``--trials`` counted trials.

Each trial process reports its dev evaluations over a socket; the thread serving it reports them to the trial and
answers whether to prune. Ctrl-C or SIGTERM asks every running trial to stop after its step (one SIGINT each: the
trainer's stop request), and each is marked failed and queued to run again; none is left running. The trial
processes start in sessions of their own, so the terminal's Ctrl-C reaches them only through the search.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Optional

from ernie_ft.errors import UserError
from ernie_ft.tuning.plan import Plan
from ernie_ft.tuning.space import Space
from ernie_ft.tuning.study import INTERRUPTED, Heartbeat, counted, report_step

TRIAL_LOG = os.path.join("logs", "tune.log")
"""A trial's console, in its run directory (``logs/`` may exist before a run starts)."""


def trial_dir(output: str, number: int) -> str:
    return os.path.join(output, f"trial-{number:03d}")


def describe(params: dict) -> str:
    return ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in params.items())


@dataclass
class Search:
    """A search ready to run."""

    plan: Plan
    space: Space
    metric: str
    study: Any
    heartbeat: Heartbeat
    output: str
    trials: int
    workers: int
    threads: int
    """Math threads per trial process (unless the flags set --threads)."""


class Runner:
    """The trials of ``search`` on this machine."""

    def __init__(self, search: Search):
        self.search = search
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.all_done = threading.Event()
        self.active = 0
        self.children: dict[int, subprocess.Popen] = {}
        self.fatal: Optional[BaseException] = None
        self.completed = self.failed = 0

    def run(self) -> None:
        """Run trials until the study has enough; KeyboardInterrupt (Ctrl-C, or SIGTERM as ``Interrupted``) after
        the running trials have stopped and been marked."""
        self.active = self.search.workers
        for _ in range(self.search.workers):
            threading.Thread(target=self._slot, daemon=True).start()
        interrupted = None
        while not self.all_done.is_set():  # an Event: a join interrupted by Ctrl-C may take a live thread for ended
            try:
                self.all_done.wait()
            except KeyboardInterrupt as e:
                if interrupted is None:
                    print(
                        "\nstopping: the running trials stop after their step and are marked failed, to run again "
                        "when the same command goes on (Ctrl-C again to stop them at once)",
                        file=sys.stderr,
                    )
                interrupted = interrupted or e
                self.stop()
        if self.fatal is not None:
            raise self.fatal
        if interrupted is not None:
            raise interrupted

    def stop(self) -> None:
        """No new trials; each running one is asked to stop (SIGINT: its trainer's stop request)."""
        with self.lock:
            self.stopping.set()
            for proc in self.children.values():
                if proc.poll() is None:
                    proc.send_signal(signal.SIGINT)

    def _slot(self) -> None:
        try:
            while not self.stopping.is_set():
                asked = self._ask()
                if asked is None:
                    return
                self._run(*asked)
        except BaseException as e:  # a bug or a lost storage: the search stops, its running trials are marked
            self.fatal = self.fatal or e
            self.stop()
        finally:
            with self.lock:
                self.active -= 1
                if self.active == 0:
                    self.all_done.set()

    def _ask(self) -> Optional[tuple[Any, dict, dict]]:
        """The next trial, its parameters and its recipe; None when the study has enough."""
        s = self.search
        with self.lock:
            while not self.stopping.is_set() and counted(s.study) < s.trials:
                trial = s.study.ask()
                s.heartbeat.beat(trial)  # from now on a killed search leaves it to be found stale
                params = s.space.suggest(trial)
                try:
                    s.plan.config(params)  # a combination the flags refuse (each value alone was checked)
                except UserError as e:
                    print(f"warning: trial {trial.number} ({describe(params)}) failed: {e}", file=sys.stderr)
                    trial.set_user_attr("error", str(e))
                    s.study.tell(trial, state=_state("FAIL"))
                    continue
                recipe = s.plan.recipe_with(params)
                trial.set_user_attr("run_dir", os.path.abspath(trial_dir(s.output, trial.number)))
                trial.set_user_attr("host", socket.gethostname())
                trial.set_user_attr("recipe", recipe)
                print(f"trial {trial.number}: {describe(params)}", file=sys.stderr)
                return trial, params, recipe
        return None

    def _run(self, trial, params: dict, recipe: dict) -> None:
        with self.search.heartbeat.beating(trial):
            self._train(trial, params, recipe)

    def _train(self, trial, params: dict, recipe: dict) -> None:
        s, out = self.search, trial_dir(self.search.output, trial.number)
        os.makedirs(os.path.dirname(os.path.join(out, TRIAL_LOG)), exist_ok=True)
        ours, theirs = socket.socketpair()
        command = [
            sys.executable,
            "-m",
            "ernie_ft.tuning.worker",
            *("--task", s.plan.spec, "--recipe", json.dumps(recipe), "--output", out),
            *("--threads", str(s.threads), "--fd", str(theirs.fileno())),
        ]
        started = time.monotonic()
        with open(os.path.join(out, TRIAL_LOG), "w", encoding="utf-8") as log, self.lock:
            proc = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, pass_fds=[theirs.fileno()], start_new_session=True
            )
            self.children[trial.number] = proc
            if self.stopping.is_set():  # a stop came while it started
                proc.send_signal(signal.SIGINT)
        theirs.close()
        pruned, outcome = self._serve(trial, ours)
        status = proc.wait()
        with self.lock:
            del self.children[trial.number]
            self._tell(trial, params, pruned, outcome, status, time.monotonic() - started)

    def _serve(self, trial, ours: socket.socket) -> tuple[bool, dict]:
        """Answer the trial's evaluations until it ends: (whether it was pruned, its last message)."""
        pruned, outcome = False, {}
        with ours, ours.makefile("r", encoding="utf-8") as reader, ours.makefile("w") as writer:
            for line in reader:
                message = json.loads(line)
                if "metrics" not in message:
                    outcome = message
                    continue
                value = message["metrics"].get(self.search.metric)
                with self.lock:
                    if value is not None and not self.stopping.is_set():
                        trial.report(value, report_step(message["epochs"]))
                        pruned = trial.should_prune()
                try:
                    writer.write("prune\n" if pruned else "go\n")
                    writer.flush()
                except OSError:
                    pass
        return pruned, outcome

    def _tell(self, trial, params: dict, pruned: bool, outcome: dict, status: int, seconds: float) -> None:
        """Record how the trial ended, and say it in one line."""
        s, metric = self.search, self.search.metric
        done = outcome.get("done") or {}
        dev = (done.get("dev") or {}).get(metric)
        if status == 0 and pruned:  # also when the prune came at its last evaluation
            s.study.tell(trial, state=_state("PRUNED"))
            print(f"trial {trial.number}: pruned ({seconds:.0f} s)", file=sys.stderr)
        elif status == 0 and dev is not None:
            if "test" in done:
                trial.set_user_attr("test", done["test"])
            s.study.tell(trial, dev)
            self.completed += 1
            print(f"trial {trial.number}: dev {metric} {dev:.4f} ({seconds:.0f} s)", file=sys.stderr)
        elif self.stopping.is_set() and "error" not in outcome:
            trial.set_user_attr(INTERRUPTED, True)
            s.study.tell(trial, state=_state("FAIL"))
            s.study.enqueue_trial(params, user_attrs={"again": trial.number})
            print(f"trial {trial.number}: stopped, marked failed; its parameters run again next time", file=sys.stderr)
        else:
            error = outcome.get("error") or f"the trial's process ended with status {status}"
            if status == 0 and dev is None:
                error = f"the trial reported no dev {metric}"
            log = os.path.join(trial_dir(s.output, trial.number), TRIAL_LOG)
            trial.set_user_attr("error", error)
            s.study.tell(trial, state=_state("FAIL"))
            self.failed += 1
            hopeless = trial.user_attrs.get("given") or (self.failed > 1 and not self.completed)
            if hopeless and not self.stopping.is_set():  # the flags themselves fail: stop rather than fail every trial
                self.fatal = UserError(f"trial {trial.number} failed: {error} (its log: {log})")
                self.stopping.set()
                for proc in self.children.values():
                    proc.send_signal(signal.SIGINT)
            else:
                print(f"warning: trial {trial.number} failed: {error} (its log: {log})", file=sys.stderr)


def _state(name: str):
    from optuna.trial import TrialState

    return TrialState[name]
