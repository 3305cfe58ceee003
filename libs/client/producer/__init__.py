"""Producing: Producer and TransactionProducer, queue selectors, auto batching, and the producer's view of
routes and broker faults. The public names are exported by :mod:`rocketmesh.client`."""
