"""A job on a real cluster: API access (client), operations the CLI prints the results of
(ops), and logs. The kubernetes client is imported only when one of them runs."""
