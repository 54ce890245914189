# The same app as the Space, for any Docker host: python app.py on port 7860, as a non-root user.
# (The Space itself uses sdk: gradio with README.md's front matter; this is for running elsewhere.)
FROM python:3.11-slim
RUN useradd -m -u 1000 user
USER user
ENV HOME=/home/user PATH=/home/user/.local/bin:$PATH \
    GRADIO_SERVER_NAME=0.0.0.0 GRADIO_SERVER_PORT=7860 \
    HF_HUB_DISABLE_TELEMETRY=1
WORKDIR /home/user/app
COPY --chown=user requirements.txt ./
RUN pip install --no-cache-dir --user -r requirements.txt
COPY --chown=user app.py ./
COPY --chown=user estimator ./estimator
COPY --chown=user estimator_app ./estimator_app
EXPOSE 7860
CMD ["python", "app.py"]
