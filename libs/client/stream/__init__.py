"""For programs that keep their own offsets (stream processors such as the Spark source): a consumer group
registered with the brokers that pulls nothing itself, and reads of exact offset ranges."""
