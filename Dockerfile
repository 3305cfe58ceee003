# One image for every rocketmesh service; docker-compose.yml picks the service by command.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY libs ./libs
COPY services ./services
COPY spark ./spark
RUN pip install --no-cache-dir .
ENV ROCKETMESH_LOG_LEVEL=INFO
