"""Facts in, verdicts out: one Check per thing the testbed can use, saying
what was found, what its absence costs and the command that fixes it, and
whether the demo (`testbed run topologies/quick.yaml` on the default backend,
which ends with a Spark analysis of its expectations) needs it. Pure: the
tests feed HostFacts and read the checks."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from orchestrator.doctor.budget import FORMULA, RouterBudget, router_budget
from orchestrator.doctor.facts import HostFacts

OK, LIMITED, MISSING, SKIPPED = "ok", "limited", "missing", "skipped"
GiB = 2**30


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # ok, limited (there, with less), missing, skipped (not measured)
    found: str
    cost: str = ""  # what is lost while it is not ok
    fix: str = ""  # the command that fixes it
    demo: bool = False  # the demo on the default backend cannot run while this is not ok

    @property
    def blocks_demo(self) -> bool:
        return self.demo and self.status not in (OK, SKIPPED)


@dataclass(frozen=True)
class Report:
    checks: tuple[Check, ...]
    default_backend: str
    budget: RouterBudget | None

    @property
    def problems(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if c.blocks_demo)

    @property
    def demo_ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        budget = None
        if self.budget is not None:
            budget = asdict(self.budget) | {"routers": self.budget.routers, "bound": self.budget.bound,
                                            "formula": FORMULA}
        return {
            "demo_ok": self.demo_ok,
            "default_backend": self.default_backend,
            "checks": [asdict(c) | {"blocks_demo": c.blocks_demo} for c in self.checks],
            "router_budget": budget,
        }


def assess(facts: HostFacts) -> Report:
    budget = router_budget(facts.cores, facts.memory.available_bytes) if facts.memory else None
    checks = (
        _python(facts),
        _environment(facts),
        _docker(facts),
        _swarm(facts),
        _image(facts),
        _storage(facts),
        _network(facts),
        _shaping(facts),
        _java(facts),
        _pyspark(facts),
        _spark_start(facts),
        _kvm(facts),
        _qemu(facts),
        _rust(facts),
        _pylibp2p(facts),
        _chromium(facts),
        _capacity(facts, budget),
    )
    return Report(checks, facts.default_backend, budget)


def _python(f: HostFacts) -> Check:
    found = f"Python {f.python} on {f.system}"
    if f.system == "Linux":
        return Check("python", OK, found, demo=True)
    return Check("python", MISSING, found, "no backend: processes need 127/8 and /proc, links need tc",
                 "run on Linux", demo=True)


def _environment(f: HostFacts) -> Check:
    if f.lock_drift is None:
        return Check("environment", SKIPPED, "installed outside the repository: no requirements.lock to compare")
    if not f.lock_drift:
        return Check("environment", OK, f"exactly requirements.lock ({f.locked_packages} packages)")
    shown = ", ".join(f.lock_drift[:4]) + (f" and {len(f.lock_drift) - 4} more" if len(f.lock_drift) > 4 else "")
    return Check("environment", LIMITED, f"{len(f.lock_drift)} differ from requirements.lock: {shown}",
                 "results from versions CI never tested", "./bootstrap.sh")


def _docker(f: HostFacts) -> Check:
    if f.docker.version is not None:
        return Check("docker", OK, f"Docker {f.docker.version}")
    return Check("docker", MISSING, f.docker.error,
                 "no docker backend: runs use --backend process (user-space shaping, no containers)",
                 "apt-get install docker.io && systemctl start docker (or set DOCKER_HOST)")


def _network(f: HostFacts) -> Check:
    if f.own_bridge is None:
        return Check("testbed network", OK, "each testbed gets a bridge of its own (containers on network none): "
                     "they stop and go all at once")
    return Check("testbed network", LIMITED, f"a Docker network per testbed ({f.own_bridge})",
                 "docker backend: containers leave a Docker network one at a time (Docker 20.10 loses "
                 "endpoint counts otherwise): `down` of 250 takes 15-45 s", "run testbed as root")


def _swarm(f: HostFacts) -> Check:
    if f.docker.version is None:
        return Check("swarm", SKIPPED, "no Docker daemon")
    if f.docker.swarm == "active":
        return Check("swarm", OK, "swarm mode active: --backend swarm can run")
    cost = ("--backend swarm cannot run (the docker backend is unaffected); one host: "
            "docker swarm init --advertise-addr 127.0.0.1, several: docs/swarm.md" if "swarm" in f.backends
            else "nothing in this version (it has no swarm backend)")
    return Check("swarm", MISSING, f"swarm mode {f.docker.swarm or 'unknown'}", cost, "docker swarm init")


def _image(f: HostFacts) -> Check:
    if f.docker.version is None:
        return Check("router image", SKIPPED, "no Docker daemon")
    image = f.docker.image
    if image is None:
        return Check("router image", MISSING, f"could not look it up: {f.docker.image_error}",
                     "the first `testbed up` tries to build it", "testbed image build")
    if image.present:
        return Check("router image", OK, f"{image.tag} (up to date, on {image.base})")
    if image.tag is None:
        found = "not built; no base image here yet"
    else:
        found = f"{image.tag} not built" + (f" (older: {', '.join(image.others)})" if image.others else "")
    return Check("router image", LIMITED, found,
                 "the first `testbed up` on docker builds it first: 8-20 s on a present base, "
                 "1-2 min from nothing (where no registry answers, debootstrap needs root)",
                 "testbed image build")


# Storage drivers that cost every container more than a kernel overlay mount:
# fuse-overlayfs runs a FUSE daemon per container (every file the router opens
# goes through it), vfs copies the whole image for each.
SLOW_STORAGE = {"fuse-overlayfs": "a FUSE daemon per container", "vfs": "a full copy of the image per container"}


def _storage(f: HostFacts) -> Check:
    if f.docker.version is None:
        return Check("docker storage", SKIPPED, "no Docker daemon")
    driver = f.docker.storage or "unknown"
    if driver not in SLOW_STORAGE:
        return Check("docker storage", OK, f"storage driver {driver}")
    return Check("docker storage", LIMITED, f"storage driver {driver}: {SLOW_STORAGE[driver]}",
                 "docker backend: containers start slower (`up` of 250 routers on 2 cores: 123-132 s on "
                 "fuse-overlayfs, 83-86 s on overlay2; `down` 15-16 s against 14-15 s; bench/bench_teardown.py)",
                 'where the data root\'s filesystem takes overlayfs (ext4, xfs): "storage-driver": "overlay2" in '
                 "/etc/docker/daemon.json, restart the daemon, then testbed image build (images do not carry over)")


def _yes(value: bool | None) -> str:
    return {True: "yes", False: "no", None: "unknown"}[value]


def _shaping(f: HostFacts) -> Check:
    p = f.shaping
    how = {"netns": "tried in a throwaway netns (needs root)",
           "config": "read from the kernel config (trying needs root)",
           "none": "could not probe"}.get(p.method, p.method)
    found = f"netem {_yes(p.netem)}, htb {_yes(p.htb)}, tbf {_yes(p.tbf)}: {how}"
    if not f.root:
        found += "; the docker backend shapes from the host and needs root"
    if p.netem and p.htb and p.tbf and f.root:
        return Check("kernel shaping", OK, found)
    if p.htb is False or p.method == "none":
        return Check("kernel shaping", MISSING, found,
                     "docker backend: all shaping (rate too) in the router's user space; the manifest says so",
                     "a kernel with CONFIG_NET_SCH_HTB and CONFIG_NET_SCH_NETEM; run as root")
    if not p.netem and f.root and p.htb and f.delay_line is None:
        return Check("kernel shaping", OK, found + "; delay, jitter and loss by the host's delay line "
                     "(gtb-delayline, NFQUEUE on each testbed's bridge), rate by htb/tbf")
    if not p.netem:
        return Check("kernel shaping", LIMITED, found + (f"; no delay line: {f.delay_line}" if f.delay_line else ""),
                     "docker backend: delay, jitter and loss in the router's user space (manifest and "
                     "report say so); rate stays in the kernel (htb/tbf)",
                     "modprobe sch_netem, or a kernel built with CONFIG_NET_SCH_NETEM; or the delay line: "
                     "./bootstrap.sh builds it where cargo is (docs/docker.md)")
    return Check("kernel shaping", LIMITED, found,
                 "docker backend without root: all shaping in the router's user space", "run testbed as root")


def _java(f: HostFacts) -> Check:
    if f.java:
        return Check("java", OK, f"Java {f.java}", demo=True)
    return Check("java", MISSING, "no java on PATH or in $JAVA_HOME",
                 "no analysis or report: a run with expectations exits 3",
                 "apt-get install default-jre-headless (or set JAVA_HOME)", demo=True)


def _pyspark(f: HostFacts) -> Check:
    if f.pyspark:
        return Check("pyspark", OK, f"PySpark {f.pyspark}", demo=True)
    return Check("pyspark", MISSING, "not installed in this environment",
                 "no analysis or report", "./bootstrap.sh", demo=True)


def _spark_start(f: HostFacts) -> Check:
    if f.spark_error:
        return Check("spark start", MISSING, f"Spark did not start: {f.spark_error}",
                     "no analysis or report", "testbed doctor --spark after fixing java/pyspark", demo=True)
    if f.spark_start_s is None:
        return Check("spark start", SKIPPED, "not measured (--spark measures it; it takes seconds)")
    return Check("spark start", OK, f"a local Spark session in {f.spark_start_s:.1f} s", demo=True)


def _kvm(f: HostFacts) -> Check:
    if f.kvm == "rw":
        return Check("kvm", OK, "/dev/kvm usable")
    if f.kvm == "pvm":
        return Check("kvm", LIMITED, "/dev/kvm is PVM (kvm_pvm): it cannot boot a stock kernel",
                     "the netem check in a guest kernel runs under TCG emulation (minutes, not seconds)",
                     "a host with kvm_intel or kvm_amd")
    fix = "modprobe kvm_intel (or kvm_amd)" if f.kvm == "absent" else "usermod -aG kvm $USER (then log in again)"
    return Check("kvm", MISSING, f"/dev/kvm {f.kvm}",
                 "no KVM guest: netem shaping cannot be verified in a guest kernel that has it", fix)


def _qemu(f: HostFacts) -> Check:
    if f.qemu:
        return Check("qemu", OK, f"qemu-system-x86_64 {f.qemu}")
    return Check("qemu", MISSING, "no qemu-system-x86_64",
                 "no KVM guest: netem shaping cannot be verified in a guest kernel that has it",
                 "apt-get install qemu-system-x86")


def _rust(f: HostFacts) -> Check:
    if f.cargo and f.rustc:
        return Check("cargo/rustc", OK, f"cargo {f.cargo}, rustc {f.rustc}")
    found = f"cargo {f.cargo or 'missing'}, rustc {f.rustc or 'missing'}"
    return Check("cargo/rustc", MISSING, found, "no rust-libp2p routers (they are built with cargo)",
                 "apt-get install cargo rustc")


def _pylibp2p(f: HostFacts) -> Check:
    if f.pylibp2p:
        return Check("py-libp2p venv", OK, f.pylibp2p)
    return Check("py-libp2p venv", MISSING, "no .venv-pylibp2p", "the py-libp2p interop tests are skipped",
                 "scripts/pylibp2p-venv.sh (its own hash-locked venv: py-libp2p needs protobuf<7)")


def _chromium(f: HostFacts) -> Check:
    if f.chromium:
        return Check("chromium", OK, f"Chromium {f.chromium}")
    return Check("chromium", MISSING, "no chromium", "the report's in-browser test skips",
                 "apt-get install chromium")


def _capacity(f: HostFacts, budget: RouterBudget | None) -> Check:
    if budget is None:
        return Check("memory and cores", SKIPPED, f"{f.cores} cores; /proc/meminfo unreadable")
    found = (f"{f.cores} cores, {budget.available_bytes / GiB:.1f} GiB available of "
             f"{f.memory.total_bytes / GiB:.1f} GiB: about {budget.routers} routers at rest "
             f"({budget.bound}-bound)")
    return Check("memory and cores", OK, found)
