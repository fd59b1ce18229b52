"""Images: where each worker starting in an image is with it (issue 32). Every second, the nodes
are asked what the supervisors of such workers last said (pulling, unpacking layer 2/5, running
in it); each new thing becomes an event of the job (so ``gpupool show`` and ``gpupool why`` say
it), and the digest the job's ``image_digest``. A job in an image stays ``starting`` until every
worker runs in it, then it is ``running``: its clock (``--max-runtime`` too) starts once it has
its image. A worker is left alone once it runs in its image."""

from __future__ import annotations

import logging

from gpupool.controller.steps.parts import Parts, PartsStep
from gpupool.domain.launch import ImagePhase
from gpupool.store import images as image_repo

log = logging.getLogger("gpupool.controller")


class WatchImages(PartsStep):
    name = "images"
    every_s = 1.0

    def __init__(self, parts: Parts) -> None:
        super().__init__(parts)
        self._said: dict[int, ImagePhase] = {}  # worker id -> what it last said
        self._running: set[int] = set()  # workers that run in their image: nothing more to hear

    def run(self, now: float) -> bool:
        p = self._parts
        with p.db.read() as s:
            live = image_repo.live_image_workers(s, ())
        by_node: dict[str, list[image_repo.ImageWorker]] = {}
        for worker in live:
            if worker.worker_id not in self._running:
                by_node.setdefault(worker.node, []).append(worker)
        news: list[tuple[image_repo.ImageWorker, ImagePhase]] = []
        for node, workers in sorted(by_node.items()):
            try:
                phases = p.executor.image_phases(node, [w.handle for w in workers])
            except Exception as exc:  # a node that does not answer is asked again in a second
                log.warning("node %s could not say where its workers are with their images: %s", node, exc)
                continue
            for worker, phase in zip(workers, phases, strict=True):
                if phase is None or self._said.get(worker.worker_id) == phase:
                    continue
                self._said[worker.worker_id] = phase
                news.append((worker, phase))
                if phase.digest is not None:
                    self._running.add(worker.worker_id)
        if news:
            ready = {w.job_id for w, phase in news if phase.digest is not None}
            with p.db.tx() as s:
                for worker, phase in news:
                    image_repo.record_phase(s, p.clock.now(), worker, phase)
                moved = image_repo.running_in_images(s, p.clock.now(), ready, self._running)
            if moved:
                p.shared.dirty = True
        ids = {w.worker_id for w in live}
        self._said = {k: v for k, v in self._said.items() if k in ids}
        self._running &= ids
        return False
