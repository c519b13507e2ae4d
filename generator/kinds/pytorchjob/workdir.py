"""A pod that leaves its command to its image, run as a uid that cannot enter the image's WORKDIR:
read from the image's config and layers in a registry."""
from __future__ import annotations

from generator.errors import Finding
from generator.job import defaults, images
from generator.job.validation import unique
from generator.kinds.pytorchjob import admission


def image_warnings(job: dict, reader, as_values: bool = False) -> list[Finding]:
    """A pod whose runAsUser cannot (or may not) enter its image's WORKDIR, so that what the command
    reads there is refused (runc still starts it: `python train.py` then fails), for each pod that
    leaves the command to its image (the project's trainer aside: validating the chart's defaults
    asks no registry). Paths are the values' with `as_values`.

    What this can honestly tell: the folder's owner and mode are in the image's layers, which are
    read from the top while they stay small (a COPY, a useradd; never a base or a pip install of
    torch), so it is told for sure where those layers hold the folder. Where they do not, only the
    config is known, and it warns ("may not") where the image was built to run as another user than
    runAsUser: a folder made for that user is often closed to others. An image built as root is then
    not warned of: `WORKDIR` makes its folder 0755, open to every uid."""
    if not job:
        return []
    trainer = defaults.chart_defaults()["image"]["repository"]
    out: list[Finding] = []
    for role, rspec in ((job.get("spec") or {}).get("pytorchReplicaSpecs") or {}).items():
        pod = ((rspec.get("template") or {}).get("spec") or {})
        main = admission.pytorch_container(rspec)
        image = str(main.get("image") or "")
        mine, shared = main.get("securityContext") or {}, pod.get("securityContext") or {}
        uid = mine.get("runAsUser", shared.get("runAsUser"))
        if main.get("command") or main.get("workingDir") or not isinstance(uid, int) or uid == 0 \
                or (images.parse(image) or ("",))[0] == trainer:
            continue
        if as_values:
            path = "securityContext.runAsUser" if "runAsUser" in mine else "podSecurityContext.runAsUser"
        else:
            path = f"spec.pytorchReplicaSpecs.{role}.template.spec." + \
                ("containers[pytorch].securityContext.runAsUser" if "runAsUser" in mine else "securityContext.runAsUser")
        # Loaded and asked only here (a registry client costs 40 ms to load): most jobs set their command.
        from generator.images import distribution, manifests

        reader = reader or distribution.Reader()
        try:
            found = reader.config(image)
        except manifests.Unreadable:
            # As before registries were read: validate stays quiet offline (the chart's default
            # runAsUser would otherwise warn of every image of the user's that no registry gives).
            continue
        config, workdir = found.config, found.config.workdir or "/"
        if workdir == "/":
            continue
        groups = {mine.get("runAsGroup", shared.get("runAsGroup")), shared.get("fsGroup"),
                  *(shared.get("supplementalGroups") or [])} - {None}
        entry = found.entry(workdir)
        fix = f"set the container's workingDir to a folder uid {uid} can enter, or open {workdir} to others in the image " \
              f"(chmod o+x)"
        if entry is not None:
            bits = entry.mode >> 6 if entry.uid == uid else entry.mode >> 3 if entry.gid in groups else entry.mode
            if bits & 1:
                continue
            held = f"mode {entry.mode & 0o7777:04o}, owner {entry.uid}:{entry.gid}, as the image's layers hold it"
            if not groups and entry.uid != uid and entry.mode >> 3 & 1:
                out.append(Finding(path, f"runs the pod as uid {uid}, which may not enter {image}'s WORKDIR {workdir} "
                                   f"({held}) unless its group is {entry.gid}: what the command reads there would then be refused",
                                   uid, f"set runAsGroup: {entry.gid}, or run as uid {entry.uid}, or {fix}"))
            else:
                out.append(Finding(path, f"runs the pod as uid {uid}, which cannot enter {image}'s WORKDIR {workdir} "
                                   f"({held}): what the command reads there is refused (Permission denied)", uid,
                                   f"run as uid {entry.uid}, or {fix}"))
            continue
        user = config.user.split(":", 1)[0]
        if user in ("", "0", "root") or (user.isdigit() and int(user) == uid):
            continue
        named = "" if user.isdigit() else " (a name: its uid is in the image's /etc/passwd, which this check does not read)"
        out.append(Finding(path, f"runs the pod as uid {uid}, but {image} was built to run as user {config.user}{named} "
                           f"and starts in its WORKDIR {workdir}, which uid {uid} may not be able to enter (the layers "
                           "that hold it are too large to read here, and a folder made for the image's user is often "
                           "closed to others): what the command reads there would then be refused", uid,
                           f"run as the image's user ({config.user}), or {fix}"))
    return unique(out)

