"""The gateway: a reverse proxy in its own process, in front of services' replicas and jobs' ports.

It runs apart from the head (``python -m gpupool.gateway``) because every request passes through
it: in the head's process it would share one GIL with the API and the controller. It talks to the
head only over HTTP (the route table, load stats, whether a token may call a route), never to the
store.

Modules: ``routes`` (the table and where it comes from), ``balance`` (pure choices: which replica,
queue or refuse, retry or not), ``headers`` (pure request and response heads), ``upstream`` (keep-
alive connections to replicas), ``pool`` (per-route replica state and the queue), ``exchange`` (one
request's trip through a replica, on callbacks), ``sweep`` (one timer for every request's timeout),
``lasthead`` (a connection's last head, reused while its headers repeat), ``server`` (the client
side: parse, route, authorise), ``access`` (the head's answers about tokens, cached), ``observe``
(``/metrics`` and the stats sent to the head), ``launch`` (starting the process).
"""
