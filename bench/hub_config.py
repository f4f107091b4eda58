# JupyterHub for the warm-launch benchmark (bench/bench.py starts it): the peer setup of
# /work/shared/bench (DummyAuthenticator, LocalProcessSpawner without the setuid, CHP, JupyterLab),
# on ports and directories the benchmark chooses. Everything on 127.0.0.1.
import os

run = os.environ["BENCH_HUB_RUN"]
venv = os.environ["BENCH_HUB_VENV"]
c = get_config()  # noqa: F821 (JupyterHub's config loader provides it)

c.JupyterHub.bind_url = f"http://127.0.0.1:{os.environ['BENCH_HUB_PROXY_PORT']}"
c.JupyterHub.hub_bind_url = f"http://127.0.0.1:{os.environ['BENCH_HUB_PORT']}"
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{os.environ['BENCH_HUB_PROXY_API_PORT']}"
c.ConfigurableHTTPProxy.command = [os.environ["CHP_BIN"]]
c.ConfigurableHTTPProxy.auth_token = os.environ["BENCH_HUB_CHP_TOKEN"]
c.ConfigurableHTTPProxy.pid_file = f"{run}/chp.pid"
c.JupyterHub.db_url = f"sqlite:///{run}/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = f"{run}/cookie_secret"
c.JupyterHub.pid_file = f"{run}/hub.pid"
c.JupyterHub.cleanup_servers = True

c.JupyterHub.authenticator_class = "dummy"
c.Authenticator.allow_all = True
c.Authenticator.admin_users = {"benchadmin"}
c.JupyterHub.spawner_class = "jupyterhub.spawner.SimpleLocalProcessSpawner"
c.SimpleLocalProcessSpawner.home_dir_template = f"{run}/homes/{{username}}"
c.Spawner.cmd = [f"{venv}/bin/jupyterhub-singleuser"]
c.Spawner.args = ["--allow-root"]
c.Spawner.default_url = "/lab"
c.Spawner.ip = "127.0.0.1"
c.Spawner.start_timeout = 180
c.Spawner.http_timeout = 180

c.JupyterHub.services = [{"name": "bench", "api_token": os.environ["BENCH_HUB_SERVICE_TOKEN"]}]
c.JupyterHub.load_roles = [{"name": "admin", "services": ["bench"]}]
