# Stand-ins for the third-party images of docker/compose.yaml, built only from Debian packages and
# the wheelhouse: for machines that reach Debian's archive but no image registry (where
# docker/smoke.sh was first run). Each target behaves like the image it stands for, as far as the
# compose file uses it (same variables, paths, ports and command form):
#
#   postgres  ~ postgres:16-bookworm   POSTGRES_USER/PASSWORD/DB, data in /var/lib/postgresql/data
#   redis     ~ redis:7-bookworm       `redis-server ...` as the command, data in /data
#   moto      ~ minio/minio            S3 on :9000; takes MinIO's `server /data ...` and ignores it
#                                      (moto[server]; objects live in memory)
#   flower    ~ mher/flower:2.0        `celery ... flower` as the command
#   cann-standin  NOT CANN: Debian + Python 3.11 + a set_env.sh that only sets a marker variable,
#             to build the ascend flavour's Dockerfile path where no CANN image can be pulled
#
#   docker build -f docker/local/services.Dockerfile --target redis -t jobservice-local/redis .
ARG BASE_IMAGE=debian:bookworm-slim

FROM ${BASE_IMAGE} AS debian
ENV DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8

FROM debian AS postgres
RUN apt-get update \
 && apt-get install -y --no-install-recommends postgresql-15 postgresql-client-15 \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /var/lib/postgresql/data /var/run/postgresql \
 && chown -R postgres:postgres /var/lib/postgresql /var/run/postgresql
COPY docker/local/postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint
ENV PATH=/usr/lib/postgresql/15/bin:$PATH PGDATA=/var/lib/postgresql/data
# hadolint ignore=DL3066
USER postgres
EXPOSE 5432
ENTRYPOINT ["postgres-entrypoint"]
CMD ["postgres"]

FROM debian AS redis
RUN apt-get update \
 && apt-get install -y --no-install-recommends redis-server \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /data && chown redis:redis /data
# hadolint ignore=DL3066
USER redis
WORKDIR /data
EXPOSE 6379
CMD ["redis-server", "--bind", "0.0.0.0", "--protected-mode", "no"]

FROM debian AS python
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY docker/wheelhouse/ /wheels/

FROM python AS moto
ARG MOTO_SPEC="moto[server]>=5.0"
# hadolint ignore=SC2016
RUN python3 -m venv /opt/moto \
 && set -- --find-links /wheels && if ls /wheels/*.whl >/dev/null 2>&1; then set -- "$@" --no-index; fi \
 && /opt/moto/bin/pip install --no-cache-dir "$@" "${MOTO_SPEC}" \
 && rm -rf /wheels \
 && useradd --system --user-group moto \
 && printf '#!/bin/sh\n# MinIO-style arguments (server /data ...) are accepted and ignored.\nexec /opt/moto/bin/moto_server -H 0.0.0.0 -p "${S3_PORT:-9000}"\n' \
    >/usr/local/bin/s3-standin && chmod +x /usr/local/bin/s3-standin
# hadolint ignore=DL3066
USER moto:moto
EXPOSE 9000
ENTRYPOINT ["s3-standin"]
CMD ["server", "/data"]

FROM python AS flower
RUN python3 -m venv /opt/flower \
 && set -- --find-links /wheels && if ls /wheels/flower-*.whl >/dev/null 2>&1; then set -- "$@" --no-index; fi \
 && /opt/flower/bin/pip install --no-cache-dir "$@" "flower>=2.0" "redis>=5" packaging \
 && rm -rf /wheels \
 && useradd --system --user-group flower
ENV PATH=/opt/flower/bin:$PATH
# hadolint ignore=DL3066
USER flower
EXPOSE 5555
CMD ["celery", "flower"]

FROM debian AS cann-standin
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /usr/local/Ascend/ascend-toolkit \
 && printf 'export JOBSERVICE_CANN_STANDIN=sourced\n' >/usr/local/Ascend/ascend-toolkit/set_env.sh
