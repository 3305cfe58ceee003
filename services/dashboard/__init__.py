"""The operators' web console (rocketmq-dashboard's role): ``rocketmesh dashboard -n NAMESRV``.

A client of the mesh like any application: it asks the name servers and brokers through the SDK's
:class:`~rocketmesh.client.admin.admin.Admin` and imports no service. Every page is rendered on the
server and has a JSON twin under ``/api`` for scripts (docs/dashboard.md lists them).

- :mod:`.config`: its settings (RocketMQ-style camelCase keys, the one config loader);
- :mod:`.accounts`: one Admin for each ACL account signed in (or one, ACL off);
- :mod:`.collector`: the background sampler of rates and lags behind the charts and the sorted lists;
- :mod:`.sessions`: sign-in, session cookies and CSRF tokens;
- :mod:`.web`: the Starlette application; :mod:`.pages`: what each page shows and changes.
"""
