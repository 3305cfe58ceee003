"""What the mesh's services share and an application never needs: a service's entry (``service_main``),
its identity and status server (``service_identity``), the system consumer group of the scheduler and the
txn-checker (``system_group``), its JSON-lines log (``log``), its OpenTelemetry SDK (``trace_export``) and
Prometheus metrics (``metrics``).

These need the ``server`` extra (``pip install 'rocketmesh[server]'``); ``extra`` checks for it, with the
standard library only, before a service starts.
"""
