"""The command lines of a job, built in one place: torchrun's for each node, sbatch's, and the job's environment.

Both backends start every node with :func:`torchrun_command`: the local backend directly (one agent
per emulated node), Slurm through ``cluster_scripts/train.sbatch``, whose per-node task runs
``python -m tutorial_lib.jobs.launch`` (:mod:`tutorial_lib.jobs.launch`), which builds the same command
from Slurm's variables and the job's record (:mod:`tutorial_lib.jobs.record`: ranks per node, ``max_restarts``,
the program). Values are always separate argv elements, never a shell string.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from tutorial_lib import REPO_ROOT
from tutorial_lib.jobs.record import RUN_DIR_ENV
from tutorial_lib.jobs.spec import JobSpec
from tutorial_lib.rundir.layout import JOB_SCRIPT, SLURM_LOG_PATTERN

SBATCH_SCRIPT = REPO_ROOT / "cluster_scripts" / "train.sbatch"
SITE_BEGIN, SITE_END = "# >>> site >>>", "# <<< site <<<"


AGENT_STORE_TIMEOUT_S = 600  # the ranks' process-group timeout (engine.distributed.init_distributed), without torch


@dataclass(frozen=True)
class Rendezvous:
    """Where the torchrun agents of a multi-node job meet (c10d), and whether this node hosts the store."""

    endpoint: str  # host:port
    run_id: str  # the same on every node of the job
    is_host: bool | None = None  # None: torchrun decides by comparing host names
    local_addr: str | None = None  # the address this node's agent gives the others (None: its host name)


def torchrun_command(python: str, nnodes: int, nproc_per_node: int, max_restarts: int, module: str,
                     program_args: list[str], rendezvous: Rendezvous | None = None) -> list[str]:
    """torchrun's argv for one node: ``nproc_per_node`` ranks of ``python -m module program_args``.

    Without a ``rendezvous`` (one node) torchrun runs ``--standalone``. torchrun restarts all ranks of
    the job up to ``max_restarts`` times when one of them dies.
    """
    command = [python, "-m", "torch.distributed.run", "--nnodes", str(nnodes), "--nproc-per-node",
               str(nproc_per_node), "--max-restarts", str(max_restarts)]
    if rendezvous is None:
        command += ["--standalone"]
    else:
        # The agents keep talking to the rendezvous store while the ranks train; a store read gave up after 60 s
        # (c10d's default), so a network outage the ranks sat out (their collectives wait up to the process
        # group's timeout) failed an agent, and with it its node (measured: a 30 s outage on netlab, 55-60 s until
        # TCP's backoff resent). The agents wait as long as the ranks do.
        conf = f"read_timeout={AGENT_STORE_TIMEOUT_S}"
        if rendezvous.is_host is not None:  # emulated nodes share one host name: say which one hosts
            conf += f",is_host={int(rendezvous.is_host)}"
        command += ["--rdzv-backend", "c10d", "--rdzv-endpoint", rendezvous.endpoint, "--rdzv-id", rendezvous.run_id,
                    "--rdzv-conf", conf]
        if rendezvous.local_addr:
            command += ["--local-addr", rendezvous.local_addr]
    return command + ["-m", module] + list(program_args)


def spec_torchrun_command(spec: JobSpec, rendezvous: Rendezvous | None = None) -> list[str]:
    """:func:`torchrun_command` for one node of ``spec``."""
    return torchrun_command(spec.python, spec.nodes, spec.ranks_per_node, spec.max_restarts, spec.module,
                            spec.program_args(), rendezvous)


def job_env(spec: JobSpec) -> dict:
    """What sbatch passes a Slurm job besides the submitting environment: where its record is
    (``TUTORIAL_RUN_DIR``: every other setting is read from there, :func:`tutorial_lib.jobs.record.read_launch`),
    where the code is, and the Python that starts each node's launcher where the site's section names none."""
    env = {RUN_DIR_ENV: str(spec.run_dir), "PYTHONPATH": str(REPO_ROOT)}
    if not spec.site.python:
        env["TUTORIAL_PYTHON"] = spec.python
    return env


def sbatch_command(spec: JobSpec, after_slurm_id: str | None = None) -> list[str]:
    """The sbatch argv that submits ``spec``'s batch script (:func:`batch_script`, written to the run
    directory as ``job.sbatch``), to start after job ``after_slurm_id``."""
    site = spec.site
    command = ["sbatch", "--parsable", f"--job-name={spec.config.name}", f"--nodes={spec.nodes}",
               "--ntasks-per-node=1", f"--time={spec.time}", f"--chdir={REPO_ROOT}",
               f"--output={spec.run_dir}/{SLURM_LOG_PATTERN}", "--export=ALL"]
    if spec.partition:
        command.append(f"--partition={spec.partition}")
    if spec.account:
        command.append(f"--account={spec.account}")
    if site.qos:
        command.append(f"--qos={site.qos}")
    if site.cpus_per_rank:
        command.append(f"--cpus-per-task={site.cpus_per_rank * spec.ranks_per_node}")
    if site.mem:
        command.append(f"--mem={site.mem}")
    if spec.asks_for_gpus:
        command.append(f"--gres=gpu:{spec.ranks_per_node}" if site.gpu_request == "gres"
                       else f"--gpus-per-node={spec.ranks_per_node}")
    if after_slurm_id is not None:
        command.append(f"--dependency=afterany:{after_slurm_id}")
    return (command + list(site.sbatch_options) + spec.sbatch_options + [str(spec.run_dir / JOB_SCRIPT)]
            + spec.program_args())


# Printed into the batch log when a setup line fails; Job.explain() and the pre-flight report quote it.
SETUP_FAILED = "error: site setup line"
SETUP_FAILURE_TRAP = (
    "trap 'tutorial_setup_status=$?; if [[ -n ${TUTORIAL_SETUP_LINE:-} ]]; then echo \"" + SETUP_FAILED
    + " ${TUTORIAL_SETUP_LINE} failed with exit status ${tutorial_setup_status} (its output is just above). Fix: "
    "correct that line of the site block (setup:), e.g. a module name that module avail lists.\" >&2; fi' EXIT")


def site_section(spec: JobSpec) -> str:
    """The lines train.sbatch's site section gets for ``spec``: the setup lines exactly as the site
    gives them, then its variables, its Python command and its container, quoted."""
    site = spec.site
    lines = [SITE_BEGIN]
    if site.setup:
        lines += ["set +u  # module load and activate scripts may read unset variables", SETUP_FAILURE_TRAP]
        for number, line in enumerate(site.setup, 1):  # a failing line ends the script (set -e): the trap names it
            lines += [f"TUTORIAL_SETUP_LINE={shlex.quote(f'{number} ({line})')}", line]
        lines += ["unset TUTORIAL_SETUP_LINE", "trap - EXIT", "set -u"]
    lines += [f"export {name}={shlex.quote(value)}" for name, value in site.env]
    if site.python:
        lines.append(f"export TUTORIAL_PYTHON={shlex.quote(site.python)}")
    container = site.container
    if container is not None and container.runtime == "pyxis":
        srun = [f"--container-image={container.image}", f"--container-workdir={REPO_ROOT}"]
        if container.binds:
            srun.append(f"--container-mounts={','.join(container.binds)}")
        lines.append(f"SITE_SRUN=({shlex.join(srun)})")
    elif container is not None:
        launch = ["apptainer", "exec"] + (["--nv"] if spec.asks_for_gpus else [])
        launch += [word for bind in container.binds for word in ("--bind", bind)] + [container.image]
        lines.append(f"SITE_LAUNCH=({shlex.join(launch)})")
    return "\n".join(lines + [SITE_END])


def batch_script(spec: JobSpec) -> str:
    """cluster_scripts/train.sbatch with its site section filled in for ``spec``."""
    text = SBATCH_SCRIPT.read_text()
    head, rest = text.split(SITE_BEGIN + "\n", 1)
    return head + site_section(spec) + rest.split(SITE_END, 1)[1]
