"""The optimizer step of an adopted job on ZeRO shards: which kind is sharded in the layout,
the step on this rank's shard of every parameter, the bf16 master copied back, the ZeRO-1
all-gather, and state torch creates lazily moved into the Manager's views. Mixed into Job."""
from typing import Optional

from . import tp


class ShardedStep:
    """The step on shards; the host class provides manager, optimizer, _params, _spec, _bf16,
    _zero3, _grads, _step_fn, _tensors and _bind_params."""

    def _sharded_kind(self) -> Optional[str]:
        """A Manager kind that ZeRO shards in the current layout (None: the step runs on whole
        local tensors, every dp rank alike)."""
        zero = self.manager.config["zero"]
        if zero >= 2:
            return "grad"
        kinds = (["master"] if self._bf16 else []) + sorted(set(self._spec.keys.values()))
        return kinds[0] if kinds and zero >= 1 else None

    def complete_ready_update(self) -> None:
        """In a recovery (_recover.py): the update of a step whose every collective this process
        did and whose commit met the loss, applied because other survivors applied it. Local:
        only where the update needs no collective (no ZeRO shards gathered)."""
        if self.manager.active:
            self._step_on_shards()

    def _step_on_shards(self) -> None:
        """One optimizer step on this rank's shard of every parameter: p.data / p.grad are the
        shard (fp32 master and grad for bf16) during the step, bound again after it."""
        m = self.manager
        sharded = self._sharded_kind()
        swap = sharded is not None or self._bf16
        zero3 = self._zero3 is not None
        if zero3:
            self._zero3.release_all()  # a parameter without a grad (frozen, unused) may still be whole
        if swap:
            data = self._tensors("master" if self._bf16 else "param")
            grads = self._tensors("grad")
            for name, p in self._params:
                d, g = data[name], grads[name]
                if sharded is not None:
                    lo, hi = m.shard_slice(name, sharded)
                    d = d if self._bf16 or zero3 else d.reshape(-1)[lo:hi]
                    g = g if self._grads.sharded else g.reshape(-1)[lo:hi]
                p.data = d
                p.grad = g.float() if self._bf16 else g
        frozen = [p for _, p in self._params if not p.requires_grad]
        for p in frozen:
            p.grad = None  # torch's optimizers skip a parameter without a grad: no update, no weight decay
        try:
            self._step_fn()
        finally:
            if swap or frozen:
                self._bind_params()
        self._keep_lazy_state()
        if self._bf16:
            self._master_to_param()
        if sharded is not None and not zero3:
            self._gather_shards()

    def _master_to_param(self) -> None:
        """The updated fp32 master into the bf16 params: into this rank's shard of a bucket where
        the master is a shard and the param whole (zero=1/2), whole where both are alike (zero=0:
        both whole; zero=3: both this rank's shards)."""
        m = self.manager
        for info, param, master in zip(m.buckets, m.buffers("param"), m.buffers("master")):
            lo, hi = (info["shard_lo"], info["shard_hi"]) if param.numel() != master.numel() else (0, param.numel())
            param[lo:hi].copy_(master)

    def _gather_shards(self) -> None:
        """ZeRO-1: each rank updated its shard of every bucket; all-gather the new weights."""
        m = self.manager
        for info, param in zip(m.buckets, m.buffers("param")):
            group = m.group("edp" if info["expert"] else "dp_cp")
            if group is not None and group.size > 1:
                tp.all_gather_in_place_(param, group)

    def _keep_lazy_state(self) -> None:
        """State torch created itself in the step (SGD's first momentum buffer) moves into the
        Manager's view, so it is switched with the rest."""
        if not self._spec.lazy:
            return
        views = {k: self._tensors(kind) for k, kind in self._spec.keys.items()}
        for name, p in self._params:
            state = self.optimizer.state.get(p)
            for key, view in views.items():
                if state is not None and key in state and state[key] is not None:
                    got = state[key]
                    if got.data_ptr() != view[name].data_ptr():
                        view[name].copy_(got.reshape(view[name].shape))
                        state[key] = view[name]
        self._lazy_started = True
