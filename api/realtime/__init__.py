"""Realtime pokes: `changesAvailable` tells a device its tenant has newer changes.

A poke carries a change token and no entity data; the device then runs its
ordinary `changes` sync. Where the signal comes from:

- `signals.py`: the in-process hub a long-running server's subscriptions wait on
  (one slot per subscription holding only the newest token, so a slow consumer
  costs the same memory as a fast one);
- `streams.py`: the table's DynamoDB stream, read for head changes, which brings
  other servers' writes (a follower thread locally, a Lambda trigger on AWS);
- `aws.py`: API Gateway WebSocket routes and the stream handler on AWS Lambda,
  with connections and subscriptions kept in the table (`connections.py`).
"""
