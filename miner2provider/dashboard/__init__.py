"""``m2p dashboard``: the fleet's web page and JSON API over the controller's history.

collect (sweeps over SSH into the history) and cluster (the farm's Kubernetes API) fill it;
views turn it into what the page shows (pure); actions run the CLI's pipeline on a rig; app serves
it all (Starlette, Jinja2 templates under templates/).
"""
