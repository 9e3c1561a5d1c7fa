# Worker image for docker-compose.yml (the no-Docker path is `make demo`).
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY streams ./streams
COPY db ./db
RUN pip install --no-cache-dir .
EXPOSE 6066
CMD ["python", "-m", "streams", "worker"]
