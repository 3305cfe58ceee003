"""The wire format: request and response codes, RemotingCommand, its frame layout, and the typed custom
headers. Pure codecs: nothing here opens a socket."""
