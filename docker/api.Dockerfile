# The API image: `jobservice api` (gunicorn, gthread workers), no torch. Also runs `jobservice db
# upgrade`, `jobservice beat` and `jobservice keys` in the compose file (docker/compose.yaml).
#
#   docker/wheelhouse.sh      # optional: offline builds (an empty docker/wheelhouse uses the index)
#   docker build -f docker/api.Dockerfile -t jobservice-api:0.2.0 \
#     --build-arg VERSION=0.2.0 --build-arg COMMIT=$(git rev-parse HEAD) .
#
# Build from the repository root (the context); needs BuildKit (any Docker from 23 on; with 20.10,
# DOCKER_BUILDKIT=1). No `# syntax=` line on purpose: the builder's own Dockerfile frontend is used,
# so nothing is pulled for it. BASE_IMAGE: any Debian 12 (bookworm) image, e.g. your mirror's, or
# one made offline by docker/base-image.sh.
ARG BASE_IMAGE=debian:bookworm-slim

FROM ${BASE_IMAGE} AS base
ENV DEBIAN_FRONTEND=noninteractive \
    LANG=C.UTF-8 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# Python 3.11 (Debian 12's python3), ffmpeg/ffprobe (uploads are probed), tini (PID 1).
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv ffmpeg tini ca-certificates \
 && rm -rf /var/lib/apt/lists/*

FROM base AS build
COPY docker/wheelhouse/ /wheels/
COPY pyproject.toml README.md /src/
COPY jobservice /src/jobservice
COPY workers /src/workers
COPY docker/build-venv.sh /usr/local/bin/build-venv
ARG PIP_OFFLINE=auto
RUN PIP_OFFLINE=${PIP_OFFLINE} build-venv api

FROM base AS api
ARG VERSION=0.0.0
ARG COMMIT=unknown
LABEL org.opencontainers.image.title="jobservice-api" \
      org.opencontainers.image.description="jobservice HTTP API (gunicorn), migrations, beat, CLI" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${COMMIT}"
RUN groupadd --system --gid 10001 jobservice \
 && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/jobservice --create-home jobservice
COPY --from=build /opt/jobservice /opt/jobservice
COPY docker/entrypoint.sh /usr/local/bin/jobservice-entrypoint
COPY docker/healthcheck.py /usr/local/lib/jobservice/healthcheck.py
ENV PATH=/opt/jobservice/bin:$PATH \
    JOBSERVICE_COMMIT=${COMMIT} \
    JOBSERVICE_VAR_DIR=/var/lib/jobservice \
    JOBSERVICE_API_HOST=0.0.0.0 \
    JOBSERVICE_API_PORT=8000
USER 10001
WORKDIR /var/lib/jobservice
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=6s --start-period=20s --retries=3 \
  CMD ["python", "/usr/local/lib/jobservice/healthcheck.py", "api"]
ENTRYPOINT ["tini", "--", "jobservice-entrypoint"]
CMD ["jobservice", "api"]
