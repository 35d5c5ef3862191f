# One image for every rollbook container (docker-compose.yml): the services, simcluster and the migration.
FROM python:3.11-slim

WORKDIR /app
# alembic.ini and migrations/ stay in /app: the `migrate` service runs `alembic upgrade head` here. An
# editable install keeps the package next to them, so commands that migrate by themselves (embedded mode,
# `rollbook db upgrade`, `rollbook demo`) find them too (a plain wheel does not ship the migrations yet).
COPY pyproject.toml README.md alembic.ini ./
COPY services ./services
COPY migrations ./migrations
# A fixed uid: Kubernetes' runAsNonRoot can only check a numeric user (deploy/ runs it as 10001).
RUN pip install --no-cache-dir -e . && useradd --system --uid 10001 --home-dir /var/lib/rollbook rollbook \
    && mkdir -p /var/lib/rollbook/simcluster && chown -R rollbook /var/lib/rollbook

USER 10001
ENV ROLLBOOK_DATA_DIR=/var/lib/rollbook PYTHONUNBUFFERED=1
CMD ["rollbook", "up"]
