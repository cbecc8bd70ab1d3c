"""NaN/Inf origin (`mldebug run --detect-anomaly`): the first module whose output, input,
weight or gradient went non-finite, found without a host sync per module.

Two global hooks of torch.nn see every module call. For each floating-point tensor a
module returns, the forward hook takes its abs-max as a 0-d tensor on the tensor's own
device (`torch.linalg.vector_norm(t, inf)`: one reduction kernel; NaN and Inf carry through
it) and keeps it, with the module's qualified name, in this step's list; on a tensor that
has a grad_fn it hangs a gradient hook that does the same with the gradient in backward.
Nothing is read back there: the values stay where the tensors are and the program runs on
as fast as its kernels go. Once per step (torch's global optimizer step pre-hook,
`mldebug.step()`, or when the list reaches MAX_ENTRIES) the values, and the abs-max of the
parameters' gradients (one `_foreach_norm`), are stacked and copied to the host in one go:
one sync per step, like GradScaler's found-inf flag. The first non-finite value in call
order names the origin: forward hooks fire child before parent, so that is the innermost
module, and the trail is the abs-max of the modules called before it.

Names: a module called while no name is known for it is a root; its named_modules() give
the qualified names (`blocks.2.gate`), without the wrappers' own level (DDP's `module`,
torch.compile's `_orig_mod`, FSDP's `_fsdp_wrapped_module`). A root's inputs are checked
too (the batch), inner modules' inputs are the outputs of the modules before them.

What is reported: one `nonfinite` event and one line on the rank's stderr, at the first
non-finite step, and again only after a step that was clean. `stop` raises
FloatingPointError with that text from the check; `torch` also turns on torch's own
anomaly mode (`torch.autograd.set_detect_anomaly(True)`) for its backward trace.

Do no harm: the values are computed from detached tensors (no graph, nothing saved, no RNG
drawn), hooks return None, and any failure inside is reported once as `agent_error`, the
hooks are removed and the program runs on. Stdlib only until the program imports torch.
"""

from __future__ import annotations

import atexit
import functools
import math
import os
import sys
import weakref
from typing import TYPE_CHECKING, Any

from .eventlog import emit as emit_event
from .eventlog import fail as fail_part
from .eventlog import fault_point
from .importhook import when_imported

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from types import FrameType

    from .steps import Steps

PART = "anomaly"

ENV_DETECT = "MLDEBUG_DETECT_ANOMALY"
MODE_ON = "on"
MODE_TORCH = "torch"
MODE_STOP = "stop"
_MODES = {"1": MODE_ON, "on": MODE_ON, "true": MODE_ON, "yes": MODE_ON}
_MODES.update({MODE_TORCH: MODE_TORCH, MODE_STOP: MODE_STOP})

MAX_ENTRIES = 8192  # values kept before a check, when no step comes (inference, eval)
MAX_MODULES = 100_000  # names kept before the dead modules' are dropped
MAX_TENSORS = 16  # tensors looked at in one module's inputs or outputs
TRAIL = 8  # abs-max values of the modules before the origin, in the report
# Containers whose own level is left out of the names of what they wrap.
WRAPPER_CLASSES = frozenset({"DistributedDataParallel", "DataParallel"})
TRANSPARENT = frozenset({"_orig_mod", "_fsdp_wrapped_module", "_checkpoint_wrapped_module"})

# What went non-finite, in the order a step computes them.
WHAT_INPUT = "input"
WHAT_OUTPUT = "output"
WHAT_WEIGHT = "weight"
WHAT_OUTPUT_GRAD = "output gradient"
WHAT_WEIGHT_GRAD = "weight gradient"


def mode_from_env(value: str | None) -> str | None:
    """MODE_* for MLDEBUG_DETECT_ANOMALY's value; None: off."""
    return _MODES.get((value or "").strip().lower())


class _Module:
    """What is known of one module: its qualified name and class, held weakly."""

    __slots__ = ("name", "cls", "ref", "root", "__weakref__")

    def __init__(self, module: Any, name: str, root: bool) -> None:
        self.name = name
        self.cls = type(module).__name__
        self.ref = weakref.ref(module)
        self.root = root

    @property
    def label(self) -> str:
        return f"{self.name} ({self.cls})" if self.name else self.cls


def qualified_names(root: Any) -> list[tuple[Any, str]]:  # torch modules: no types here
    """(module, name) for a root and everything under it, in named_modules() order, the
    wrappers' own level left out (DDP(Net).module.blocks.0 is `blocks.0`)."""
    out: list[tuple[Any, str]] = []
    seen: set[int] = set()
    stack = [(root, "")]
    while stack:
        module, name = stack.pop()
        if id(module) in seen:
            continue
        seen.add(id(module))
        out.append((module, name))
        wrapper = type(module).__name__ in WRAPPER_CLASSES
        children = []
        for child_name, child in module._modules.items():
            if child is None:
                continue
            if child_name in TRANSPARENT or (wrapper and child_name == "module"):
                full = name
            else:
                full = f"{name}.{child_name}" if name else child_name
            children.append((child, full))
        stack.extend(reversed(children))
    return out


def _tensors(value: Any, tensor_type: Any) -> list:
    """The tensors of a module's inputs or outputs: the value, or the first level of a
    tuple, list or dict (a transformers ModelOutput is a dict)."""
    if isinstance(value, tensor_type):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (tuple, list)):
        return [item for item in value[:MAX_TENSORS] if isinstance(item, tensor_type)]
    return []


class Detector:
    """The hooks, this step's values, and the check that reads them once per step."""

    def __init__(
        self,
        rank: int,
        mode: str,
        is_library: Callable[[str], object],
        step_of: Callable[[], int | None] | None = None,
        emit: Callable[..., object] | None = None,
        failed: Callable[[str, BaseException], object] | None = None,
    ) -> None:
        self.rank = rank
        self.mode = mode
        self.is_library = is_library  # rankrules.is_library_path
        # The rank's step (None before the first): the agent's count, else our own.
        self.count = 0  # optimizer steps seen (without the agent's count)
        self.step_of = step_of or (lambda: self.count or None)
        self.emit = emit or emit_event  # emit(kind, message, **fields): events.jsonl
        self.failed_report = failed or fail_part  # (part, error): said once
        self.pid = os.getpid()
        self.active = True
        self.failed = False
        self.reported = False  # a report since the last clean step: stay quiet
        self.entries: list = []  # (module info, what, 0-d value tensor, site, root site)
        self.infos: dict[int, _Module] = {}  # id(module) -> its name (checked by weakref)
        self.params: dict[int, tuple] = {}  # id(param) -> (weakref, _Module, param name)
        self.handles: list = []
        self.root_site: tuple[str, int] | None = None
        self.torch: Any = None  # the program's torch, once it is imported
        self.module_file: str | None = None
        self._last_output: weakref.ref[Any] | None = None  # the last tensor recorded as an output
        self._library_cache: dict[str, bool] = {}
        self._torch_anomaly = False
        self._plain: tuple[type, ...] = ()
        self._strided: Any = None

    # ---- installing and removing ----

    def install_module_hooks(self, module_module: Any) -> None:
        """torch.nn.modules.module has just been executed: hook every module call."""
        try:
            self.module_file = module_module.__file__
            self.handles.append(module_module.register_module_forward_pre_hook(self._pre))
            self.handles.append(module_module.register_module_forward_hook(self._post))
            os.register_at_fork(after_in_child=self._forked)
            atexit.register(self._at_exit)
        except Exception as error:
            self.fail(error)

    def install_step_hook(self, optimizer_module: Any) -> None:
        """torch.optim.optimizer has just been executed: check before every step."""
        try:
            hook = optimizer_module.register_optimizer_step_pre_hook(self._before_step)
            self.handles.append(hook)
        except Exception as error:
            self.fail(error)

    def remove(self) -> None:
        self.active = False
        for handle in self.handles:
            try:
                handle.remove()
            except Exception:
                pass
        self.handles.clear()
        self.entries = []

    def _forked(self) -> None:
        """A DataLoader worker (or any child) is no rank: it keeps no values."""
        self.active = False
        self.entries = []

    def fail(self, error: BaseException) -> None:
        """Said once (an agent_error event, a stderr line); the hooks go, the program runs on."""
        if self.failed:
            return
        self.failed = True
        self.remove()
        try:
            self.failed_report(PART, error)
        except Exception:
            pass

    # ---- the hooks (no host sync in any of them) ----

    def _load_torch(self) -> Any:
        """torch and what the hooks call, once: the program has imported it by now."""
        torch = sys.modules["torch"]
        if self.torch is None:
            self._plain = (torch.Tensor, torch.nn.Parameter)
            self._strided = torch.strided
            self._aminmax = torch.aminmax
            self._compiling = torch.compiler.is_compiling
            self._wrapped = torch._C._functorch.is_functorch_wrapped_tensor
            self.torch = torch
        return torch

    def _absmax(self, tensor: Any) -> Any:
        """(min, max) of the tensor as 0-d tensors on its device (abs-max and NaN/Inf can be
        told from them: NaN carries through, Inf stays); None for what is not checked.
        aminmax, not vector_norm(inf): one vectorised kernel, ten times faster on CPU."""
        if (
            type(tensor) not in self._plain
            or not tensor.is_floating_point()
            or tensor.layout is not self._strided
            or tensor.is_meta
            or tensor.numel() == 0
            or self._wrapped(tensor)
        ):
            return None
        return self._aminmax(tensor.detach())

    def _pre(self, module: Any, args: tuple) -> None:
        # The common case costs a dict lookup: a known module that is not a root.
        if self.active:
            info = self.infos.get(id(module))
            if info is None or info.root or info.ref() is not module:
                self._enter(module, args)
        return None

    def _enter(self, module: Any, args: tuple) -> None:
        """A root (or a module not seen yet) is called: name it, check its inputs."""
        try:
            fault_point(PART)
            torch = self.torch or self._load_torch()
            if self._compiling():
                return
            info = self._info(module)
            if not info.root:
                return
            self.root_site = self._user_site()
            if self.mode == MODE_TORCH and not self._torch_anomaly:
                self._torch_anomaly = True
                torch.autograd.set_detect_anomaly(True)
            for tensor in _tensors(args, torch.Tensor):
                value = self._absmax(tensor)
                if value is not None:
                    self.entries.append((info, WHAT_INPUT, value, None, self.root_site))
        except Exception as error:
            self.fail(error)

    def _post(self, module: Any, args: tuple, output: Any) -> None:
        if not self.active:
            return None
        try:
            torch = self.torch or self._load_torch()
            if self._compiling():
                return None
            tensors = _tensors(output, torch.Tensor)
            if not tensors:
                return None
            info = self.infos.get(id(module))
            if info is None or info.ref() is not module:
                info = self._info(module)
            site, root_site = self._caller(), self.root_site
            last = self._last_output
            for tensor in tensors:
                if last is not None and last() is tensor:
                    continue  # a container handing on its last child's output: seen
                value = self._absmax(tensor)
                if value is None:
                    continue
                self.entries.append((info, WHAT_OUTPUT, value, site, root_site))
                node = tensor.grad_fn
                if node is not None and tensor.requires_grad:
                    # A pre-hook of the node that made the tensor gets its gradient first
                    # thing in backward (cheaper than Tensor.register_hook, and it goes
                    # with the graph when backward frees it).
                    hook = functools.partial(self._grad, info, site, root_site, tensor.output_nr)
                    node.register_prehook(hook)
            self._last_output = weakref.ref(tensors[-1])
        except Exception as error:
            self.fail(error)
        if len(self.entries) >= MAX_ENTRIES:
            self._check_and_report(None)
        return None

    def _grad(
        self,
        info: _Module,
        site: tuple[str, int] | None,
        root_site: tuple[str, int] | None,
        index: int,
        grad_outputs: tuple,
    ) -> None:
        if not self.active:
            return None
        try:
            grad = grad_outputs[index] if index < len(grad_outputs) else None
            value = self._absmax(grad) if grad is not None else None
            if value is not None:
                self.entries.append((info, WHAT_OUTPUT_GRAD, value, site, root_site))
        except Exception as error:
            self.fail(error)
        return None

    def _before_step(self, optimizer: Any, args: tuple, kwargs: dict) -> None:
        if self.active:
            self._check_and_report(optimizer)
        self.count += 1
        return None

    def step_ends(self) -> None:
        """mldebug.step() is about to move the step: check the one that ends."""
        if self.active:
            self._check_and_report(None)

    def _at_exit(self) -> None:
        """What the last step left unchecked (a program that ended on its own NaN guard)."""
        if not self.active or os.getpid() != self.pid:
            return
        try:
            report = self.check(None)
            if report is not None:
                self._report(report)
        except Exception:
            pass  # torch may be half torn down: nothing to say at exit

    # ---- names and places ----

    def _info(self, module: Any) -> _Module:
        """The module's name; a module not seen yet is a root, named with all under it."""
        info = self.infos.get(id(module))
        if info is not None and info.ref() is module:
            return info
        if len(self.infos) > MAX_MODULES:  # modules made and dropped by the thousand
            self.infos = {k: v for k, v in self.infos.items() if v.ref() is not None}
            self.params = {k: v for k, v in self.params.items() if v[0]() is not None}
        for found, name in qualified_names(module):
            known = self.infos.get(id(found))
            if known is not None and known.ref() is found:
                continue
            self.infos[id(found)] = _Module(found, name, found is module)
            for param_name, param in found.named_parameters(recurse=False):
                self.params[id(param)] = (weakref.ref(param), self.infos[id(found)], param_name)
        return self.infos[id(module)]

    def _caller(self) -> tuple[str, int] | None:
        """(file, line) of the code that called the module (the parent's forward)."""
        frame: FrameType | None = sys._getframe(2)
        while frame is not None and frame.f_code.co_filename == self.module_file:
            frame = frame.f_back
        return (frame.f_code.co_filename, frame.f_lineno) if frame is not None else None

    def _library(self, path: str) -> bool:
        known = self._library_cache.get(path)
        if known is None:
            known = self._library_cache[path] = bool(self.is_library(path))
        return known

    def _user_site(self) -> tuple[str, int] | None:
        """(file, line) of the innermost frame of the user's own code."""
        frame: FrameType | None = sys._getframe(2)
        while frame is not None and self._library(frame.f_code.co_filename):
            frame = frame.f_back
        return (frame.f_code.co_filename, frame.f_lineno) if frame is not None else None

    # ---- the check: one sync per step ----

    def _check_and_report(self, optimizer: Any) -> None:
        report = None
        try:
            report = self.check(optimizer)
            if report is not None:
                self._report(report)
        except Exception as error:
            self.fail(error)
            return
        if report is not None and self.mode == MODE_STOP and report["stops"]:
            self.remove()
            raise FloatingPointError(report["console"])

    def _weight_grads(self, optimizer: Any) -> list:
        """(module info, param name, gradient) of the optimizer's parameters."""
        out = []
        for group in optimizer.param_groups:
            for param in group["params"]:
                grad = param.grad
                if grad is None or self._absmax_skips(grad):
                    continue
                known = self.params.get(id(param))
                if known is None or known[0]() is not param:
                    continue
                out.append((known[1], known[2], grad.detach()))
        return out

    def _absmax_skips(self, tensor: Any) -> bool:
        return (
            type(tensor) not in self._plain
            or not tensor.is_floating_point()
            or tensor.layout is not self._strided
            or tensor.numel() == 0
        )

    def check(self, optimizer: Any = None) -> dict | None:
        """This step's values to the host in one go; the report of the first non-finite
        one, or None (all finite, nothing recorded, or already reported)."""
        entries, self.entries = self.entries, []
        self._last_output = None
        if self.torch is None:
            return None
        torch = self.torch
        grads = self._weight_grads(optimizer) if optimizer is not None else []
        if grads:
            # The 2-norm: one fused pass over all gradients (the inf-norm is ten times
            # slower on CPU). It overflows for finite values past ~1e19, so a non-finite
            # one is confirmed on the gradient itself before it is reported.
            norms = torch._foreach_norm([grad for _, _, grad in grads], 2)
            entries.extend(
                (info, WHAT_WEIGHT_GRAD, (norm,), None, None, name, grad)
                for (info, name, grad), norm in zip(grads, norms, strict=True)
            )
        if not entries:
            return None
        if _all_finite(torch, entries):
            self.reported = False
            return None
        host = _to_host(torch, [entry[2] for entry in entries])
        first = next((i for i, value in enumerate(host) if self._bad(entries[i], value)), None)
        if first is None:
            self.reported = False
            return None
        if self.reported:
            return None
        self.reported = True
        return self._describe(entries, host, first)

    def _bad(self, entry: tuple, value: float) -> bool:
        if math.isfinite(value):
            return False
        if entry[1] == WHAT_WEIGHT_GRAD:
            return not bool(self.torch.isfinite(entry[6]).all())
        return True

    def _describe(self, entries: list[tuple], host: list[float], first: int) -> dict:
        entry = entries[first]
        info, what, site, root_site = entry[0], entry[1], entry[3], entry[4]
        label = info.label
        if what == WHAT_OUTPUT and self._weights_bad(info):
            what = WHAT_WEIGHT
        param = None
        if what == WHAT_WEIGHT_GRAD:
            value = "nan" if bool(self.torch.isnan(entry[6]).any()) else "inf"
            param = entry[5]
        else:
            value = "nan" if math.isnan(host[first]) else "inf"
        if site is None or self._library(site[0]):
            site = root_site
        location = f"{site[0]}:{site[1]}" if site else None
        start = max(0, first - TRAIL)
        trail = []
        for before, amax in zip(entries[start:first], host[start:first], strict=True):
            name = before[0].name or before[0].cls
            if before[1] == WHAT_WEIGHT_GRAD:
                name = f"{name}.{before[5]} (gradient norm)"
            elif before[1] != WHAT_OUTPUT:
                name = f"{name} ({before[1]})"
            trail.append([name, amax])
        step = self.step_of()
        text = f"{label} {what} became {value}"
        if param is not None:
            text = f"{label} {param} gradient became {value}"
            if _distributed():  # averaged across the ranks: another rank may have begun it
                text += " (gradients are averaged across ranks)"
        when = f"step {step}" if step is not None else "before the first step"
        console = f"rank {self.rank} {when}: {text}"
        if location:
            console += f", called at {location}"
        return {
            "message": f"{text} {'at ' if step is not None else ''}{when}",
            "console": console,
            "step": step,
            "location": location,
            "module": info.name,
            "module_type": info.cls,
            "what": what,
            "param": param,
            "value": value,
            "trail": trail,
            # A weight gradient was averaged across the ranks: another rank may be the
            # origin, so it never stops this one.
            "stops": param is None or not _distributed(),
        }

    def _weights_bad(self, info: _Module) -> bool:
        """Are the module's own parameters non-finite? (read on a report only)"""
        module = info.ref()
        if module is None:
            return False
        for _, param in module.named_parameters(recurse=False):
            if not self._absmax_skips(param) and not bool(
                self.torch.isfinite(param.detach()).all()
            ):
                return True
        return False

    def _report(self, report: dict) -> None:
        _say(f"mldebug: {report['console']}")
        names = ("step", "location", "module", "module_type", "what", "param")
        fields = {k: report[k] for k in names if report[k] is not None}
        self.emit(
            "nonfinite", report["message"], value=report["value"], trail=report["trail"], **fields
        )


def _stacks(torch: Any, tensors: list) -> list:
    """The 0-d tensors stacked, one stack per device: [(indices, stacked)]."""
    try:
        return [(range(len(tensors)), torch.stack(tensors))]
    except RuntimeError:  # on more than one device
        by_device: dict = {}
        for index, tensor in enumerate(tensors):
            by_device.setdefault(tensor.device, []).append(index)
        return [
            (indices, torch.stack([tensors[i] for i in indices])) for indices in by_device.values()
        ]


def _all_finite(torch: Any, entries: list) -> bool:
    """The fast path of a clean step: one reduction and one sync per device."""
    flat = [tensor for entry in entries for tensor in entry[2]]
    return all(bool(torch.isfinite(stacked).all()) for _, stacked in _stacks(torch, flat))


def _to_host(torch: Any, values: list) -> list[float]:
    """Each entry's abs-max as a float, from its (min, max) or (norm,) 0-d tensors on
    whatever devices: one stack and one copy per device."""
    flat = [tensor for value in values for tensor in value]
    numbers = [0.0] * len(flat)
    for indices, stacked in _stacks(torch, flat):
        for index, number in zip(indices, stacked.cpu().tolist(), strict=True):
            numbers[index] = number
    host, at = [], 0
    for value in values:
        part = numbers[at : at + len(value)]
        at += len(value)
        if any(math.isnan(number) for number in part):
            host.append(math.nan)
        else:
            host.append(max(abs(number) for number in part))
    return host


def _distributed() -> bool:
    dist = sys.modules.get("torch.distributed")
    try:
        return bool(
            dist and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
        )
    except Exception:
        return False


def _say(text: str) -> None:
    try:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()
    except Exception:
        pass


def _check_before_explicit_steps(steps: Steps, detector: Detector) -> None:
    """mldebug.step() moves the agent's step count (`steps.set`): the step that ends is
    checked first, while the count still says which step it was."""
    moved = steps.set

    def set_step(n: int | None = None) -> None:
        detector.step_ends()  # stop mode raises FloatingPointError out of mldebug.step()
        moved(n)

    steps.set = set_step  # type: ignore[method-assign]  # this one instance's method, on purpose


# runtime: agent/__init__.py's _Runtime (not imported for its type: that would be a cycle)
def start(runtime: Any, environ: Mapping[str, str] = os.environ) -> Detector | None:
    """The detector of a running agent, when MLDEBUG_DETECT_ANOMALY asks for it: it hooks
    torch.nn and torch.optim once the program has imported them."""
    mode = mode_from_env(environ.get(ENV_DETECT))
    if mode is None:
        return None
    steps = runtime.steps
    detector = Detector(
        runtime.rank, mode, runtime.rankrules.is_library_path, step_of=lambda: steps.value
    )
    when_imported("torch.nn.modules.module", detector.install_module_hooks, PART)
    when_imported("torch.optim.optimizer", detector.install_step_hook, PART)
    _check_before_explicit_steps(steps, detector)
    return detector
