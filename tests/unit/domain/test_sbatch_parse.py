"""#SBATCH lines and sbatch options read as sbatch reads them: short and long forms, Slurm's time formats,
the first command ends the options, the command line wins; an unsupported option or a malformed line is an
error naming it and its line. Output names: Slurm's symbols as shell words."""

from __future__ import annotations

import subprocess

import pytest

from gpupool.domain.errors import InputError
from gpupool.domain.sbatch import output_path_shell, parse_options, parse_script
from gpupool.domain.workload import rank_place, slurm_env

SCRIPT = """#!/bin/bash -l
# a comment
#SBATCH --job-name=train -N 2
#SBATCH --ntasks-per-node 4
#SBATCH --gres=gpu:a100:8   # eight per node
#SBATCH -t 1-02:30 --array=0-19%4 -d afterok:j-1:j-2,afterany:j-3
#SBATCH -o out-%A_%a.log -e err-%j.log -p research --qos=high --signal=B:USR1@120
#SBATCH --mem=64G -c 8

srun python train.py
#SBATCH --mail-type=ALL
"""


def test_every_supported_option_is_read_from_the_script() -> None:
    s = parse_script(SCRIPT, "job.sh")
    o = s.options
    assert s.interpreter == ("/bin/bash", "-l")
    assert (o.job_name, o.nodes, o.ntasks_per_node, o.gpus_per_node, o.gpu_type) == ("train", 2, 4, 8, "a100")
    assert o.time_s == 86400 + 2 * 3600 + 30 * 60
    assert o.array == "0-19%4"
    assert o.dependency == (("afterok", ("j-1", "j-2")), ("afterany", ("j-3",)))
    assert (o.output, o.error, o.partition, o.qos, o.signal_lead_s) == (
        "out-%A_%a.log",
        "err-%j.log",
        "research",
        "high",
        120.0,
    )
    assert (o.mem_mib, o.cpus_per_task) == (65536, 8)
    assert o.where("array") == "job.sh:6" and o.where("job_name") == "job.sh:3"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30", 1800), ("30:15", 1815), ("2:00:00", 7200), ("1-0", 86400), ("1-2:30", 95400), ("1-2:30:05", 95405)],
)
def test_slurm_time_formats(text: str, seconds: int) -> None:
    assert parse_options([f"--time={text}"], "command line").time_s == seconds


def test_the_command_line_wins_over_the_script() -> None:
    script = parse_script("#!/bin/sh\n#SBATCH -J a -t 10 --array=0-3\n", "s.sh").options
    cli = parse_options(["-J", "b", "--time", "5"], "command line")
    o = cli.over(script)
    assert (o.job_name, o.time_s, o.array) == ("b", 300.0, "0-3")
    assert o.where("job_name") == "command line" and o.where("array") == "s.sh:2"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("#!/bin/sh\n#SBATCH --mail-type=ALL\n", "s.sh:2: sbatch option --mail-type is not supported"),
        ("#!/bin/sh\n\n#SBATCH -x node1\n", "s.sh:3: sbatch option -x is not supported"),
        ("#!/bin/sh\n#SBATCH --job-name='open\n", "s.sh:2: malformed #SBATCH line: No closing quotation"),
        ("#!/bin/sh\n#SBATCH\n", "s.sh:2: an #SBATCH line without an option"),
        ("#!/bin/sh\n#SBATCH: --time=5\n", "s.sh:2: '#SBATCH: --time=5' is not an #SBATCH line"),
        ("#!/bin/sh\n#SBATCH --time=4x\n", "s.sh:2: --time=4x: '4x' is not a Slurm time"),
        ("#!/bin/sh\n#SBATCH --time\n", "s.sh:2: --time needs a value"),
        ("#!/bin/sh\n#SBATCH --nodes=2-4\n", "s.sh:2: --nodes=2-4: a range of node counts is not supported"),
        ("#!/bin/sh\n#SBATCH --gres=mps:50\n", "s.sh:2: --gres=mps:50: only gpu:N or gpu:TYPE:N"),
        ("#!/bin/sh\n#SBATCH --signal=TERM@30\n", "s.sh:2: --signal=TERM@30: gpupool sends SIGUSR1"),
        ("#!/bin/sh\n#SBATCH --qos=gold\n", "s.sh:2: --qos=gold: a QOS is one of gpupool's priorities"),
        ("#!/bin/sh\n#SBATCH -d singleton\n", "s.sh:2: --dependency=singleton: 'singleton' is not KIND:JOB"),
        ("echo no shebang\n", "s.sh:1: a batch script starts with #!"),
    ],
)
def test_bad_lines_are_named_with_their_line(text: str, message: str) -> None:
    with pytest.raises(InputError) as e:
        parse_script(text, "s.sh")
    assert str(e.value).startswith(message), str(e.value)


def test_options_end_at_the_first_command() -> None:
    o = parse_script("#!/bin/sh\n#SBATCH -J a\necho hi\n#SBATCH --mail-type=ALL\n#SBATCH -J b\n", "s.sh").options
    assert o.job_name == "a"


def test_output_names_expand_in_the_shell() -> None:
    word = output_path_shell("o-%j_%A_%a-%x-%n.%t-100%%-$HOME 'q'.log", "o")
    env = {"SLURM_JOB_ID": "j-1.2", "SLURM_ARRAY_JOB_ID": "j-1", "SLURM_ARRAY_TASK_ID": "2", "SLURM_JOB_NAME": "n"}
    env |= {"SLURM_NODEID": "0", "SLURM_PROCID": "3", "PATH": "/usr/bin:/bin"}
    out = subprocess.run(["/bin/sh", "-c", f"printf %s {word}"], env=env, capture_output=True, text=True).stdout
    assert out == "o-j-1.2_j-1_2-n-0.3-100%-$HOME 'q'.log"
    plain = subprocess.run(
        ["/bin/sh", "-c", f"printf %s {output_path_shell('%A_%a', 'o')}"], env={"SLURM_JOB_ID": "j-9"},
        capture_output=True, text=True,
    ).stdout  # fmt: skip
    assert plain == "j-9_4294967294"
    with pytest.raises(InputError, match=r"%4 in 'x-%4a' is not supported"):
        output_path_shell("x-%4a", "o")


def test_slurm_env_of_a_rank_in_a_two_node_array_element() -> None:
    place = rank_place(["dgx001", "dgx001", "dgx002", "dgx002"], 2)
    env = slurm_env("j-1.3", "sweep", place, "dgx[001-002]", 8, "research", "j-1", 3)
    assert env["SLURM_JOB_ID"] == "j-1.3" and env["SLURM_ARRAY_JOB_ID"] == "j-1" and env["SLURM_ARRAY_TASK_ID"] == "3"
    assert (env["SLURM_NNODES"], env["SLURM_NODEID"], env["SLURM_PROCID"], env["SLURM_LOCALID"]) == ("2", "1", "2", "0")
    assert (env["SLURM_NTASKS"], env["SLURM_NTASKS_PER_NODE"], env["SLURMD_NODENAME"]) == ("4", "2", "dgx002")
    assert env["SLURM_JOB_NODELIST"] == "dgx[001-002]" and env["SLURM_GPUS_ON_NODE"] == "8"
    assert env["SLURM_JOB_PARTITION"] == "research" and env["SLURM_JOB_NAME"] == "sweep"
    assert "SLURM_ARRAY_JOB_ID" not in slurm_env("j-2", "", place, "x", 1, "default")
