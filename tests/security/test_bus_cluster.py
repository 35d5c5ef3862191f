"""The embedded 3-node NATS cluster with rollbook's identities: a stream replicated over authenticated
routes, and the same refusals as a single server."""

from __future__ import annotations

import uuid
from pathlib import Path

import nats
import nats.errors
import pytest

from services.infra.bus import Bus
from services.infra.nats_auth import AUDITOR, EXECUTOR
from services.infra.nats_cluster import EmbeddedNatsCluster
from services.infra.settings import Settings
from tests.security.bus_server import Refusals, connect_as

pytestmark = pytest.mark.servers


async def test_a_cluster_admits_only_rollbooks_identities(server_data_dir: Path) -> None:
    suffix = uuid.uuid4().hex[:8]
    wanted = Settings(
        stream_name=f"RBCL_{suffix}", subject_prefix=f"rbcl{suffix}", bus_replicas=3, bus_partitions=2
    )
    async with EmbeddedNatsCluster(server_data_dir, size=3, settings=wanted) as cluster:
        settings = cluster.client_settings(wanted)
        auditor = await Bus.connect(settings, name="rollbook-auditor", identity=AUDITOR)
        try:
            await auditor.ensure_stream()
            info = await auditor.js.stream_info(settings.stream_name)
            assert info.config.num_replicas == 3 and info.cluster is not None
            assert len(info.cluster.replicas or []) == 2  # the stream lives on all three nodes
        finally:
            await auditor.close()
        for url in cluster.urls:  # every node refuses a client without credentials
            with pytest.raises(nats.errors.Error):
                client = await nats.connect(url, allow_reconnect=False, connect_timeout=3)
                await client.close()
        refusals = Refusals()
        executor = await connect_as(settings, EXECUTOR, refusals)
        try:
            await executor.publish(f"{settings.subject_prefix}.ev.p0.Pod.default.x.PodActionRequested", b"{}")
            await executor.flush()
            assert "permissions violation" in (await refusals.wait()).lower()
        finally:
            await executor.close()
    for name in ("n0.conf", "auditor", "route"):
        path = server_data_dir / name if name.endswith(".conf") else cluster.credentials_dir / name
        assert path.stat().st_mode & 0o077 == 0, path  # readable by their owner only
