"""Connections over ZeroMQ: the RemotingServer (ROUTER) and RemotingClient (DEALER), their pending
requests, mailboxes, socket monitors and CurveZMQ keys."""
