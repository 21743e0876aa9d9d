"""Kubernetes: the manifests of one probe of a PersistentVolumeClaim from N nodes (`ckplan k8s`).

`request.ManifestRequest` holds what is asked and Kubernetes' rules for it; `manifests` builds the objects in
one of its forms (an Indexed Job and a headless Service, or a JobSet). Nothing here talks to a cluster.
"""
