"""`voicewire voices add|list|rm`: the voice library of a running server, over its HTTP API."""

from __future__ import annotations

import argparse
import json
import logging
import os
from pathlib import Path
from typing import Any


def request(args: argparse.Namespace, method: str, path: str, content_type: str = "", **kwargs: Any) -> Any:
    import httpx

    from voicewire.client import http_url

    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request is noise here
    key = args.api_key or os.environ.get("VOICEWIRE_API_KEY")
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    if content_type:
        headers["Content-Type"] = content_type
    url = http_url(args.url) + path
    try:
        response = httpx.request(method, url, headers=headers, timeout=300, **kwargs)
    except httpx.HTTPError as exc:
        raise ValueError(f"could not reach {url}: {exc}") from None
    try:
        body = response.json()
    except ValueError:
        body = {"error": {"message": response.text.strip() or response.reason_phrase, "code": "?"}}
    if response.status_code >= 400:
        error = body.get("error", {}) if isinstance(body, dict) else {}
        raise ValueError(
            f"the server refused ({response.status_code} {error.get('code')}): {error.get('message')}"
        )
    return body


def voices(args: argparse.Namespace) -> int:
    if args.action == "add":
        path = Path(args.file)
        fields = {"name": args.name or path.stem, "language": args.language, "description": args.description}
        if args.ref_text:
            fields["ref_text"] = args.ref_text
        data = path.read_bytes()  # FileNotFoundError: one line from main
        made = request(
            args, "POST", "/v1/voices", content=data, params=fields, content_type="application/octet-stream"
        )
        print(json.dumps(made))
    elif args.action == "list":
        listed = request(args, "GET", "/v1/voices")
        for speaker in listed.get("voices", []):
            print(f"{speaker['id']}\tspeaker")
        for voice in listed.get("stored", []):
            kind = "in-context" if voice["in_context"] else "x-vector"
            print(f"{voice['id']}\t{voice['name']}\t{voice['duration']:.1f} s\t{kind}")
    else:
        request(args, "DELETE", f"/v1/voices/{args.id}")
        print(f"deleted {args.id}")
    return 0


def add_parser(sub: Any) -> None:
    parser = sub.add_parser("voices", help="the voice library of a running server: add, list, rm")
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="server address (http:// or ws://)")
    parser.add_argument("--api-key", help="API key (default: $VOICEWIRE_API_KEY)")
    actions = parser.add_subparsers(dest="action", required=True)
    add = actions.add_parser("add", help="clone a voice from a reference file (WAV, FLAC, OGG)")
    add.add_argument("file", type=Path)
    add.add_argument("--name", help="default: the file's name")
    add.add_argument("--ref-text", help="the reference's transcript: clones in context")
    add.add_argument("--language", default="auto")
    add.add_argument("--description", default="")
    actions.add_parser("list", help="the checkpoint's speakers and your stored voices")
    rm = actions.add_parser("rm", help="delete a stored voice")
    rm.add_argument("id")
    parser.set_defaults(func=voices)
