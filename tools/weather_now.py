"""Shipped example user tool: current weather from an HTTP API that needs a key.

It shows how a user tool reaches the one host it needs with a key it never contains: the
operator stores the key (`navi secrets set weather_key --tenant T`, or
`PUT /v1/tenants/{id}/secrets/weather_key`) and grants it, with the host, in the policy:

    tools:
      weather_now:
        network: egress
        egress: [api.weather.example]
        secrets: {WEATHER_API_KEY: weather_key}
        tool_hash: <sha256 of this file>     # a changed file no longer gets the key

The call's sandbox then has WEATHER_API_KEY in its environment and its requests go through
the egress proxy, to the granted host only. Without the grant the tool says what is missing.
"""

name = "weather_now"
description = (
    "Current weather for a city from the operator's weather API (needs the weather_key "
    "secret and the API's host granted by the policy)."
)
parameters = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "minLength": 1, "maxLength": 100},
        "endpoint": {
            "type": "string",
            "description": "the API's URL (default https://api.weather.example/v1/current)",
            "maxLength": 300,
        },
    },
    "required": ["city"],
    "additionalProperties": False,
}


async def execute(params):
    import json
    import os
    import urllib.parse
    import urllib.request

    key = os.environ.get("WEATHER_API_KEY")
    if not key:
        return "weather_now has no WEATHER_API_KEY: the policy does not grant it the secret"
    endpoint = params.get("endpoint") or "https://api.weather.example/v1/current"
    if not endpoint.startswith(("http://", "https://")):
        raise ValueError("endpoint must be an http(s) URL")
    url = f"{endpoint}?{urllib.parse.urlencode({'city': params['city']})}"
    request = urllib.request.Request(url, headers={"X-Api-Key": key,
                                                   "Accept": "application/json"})
    with urllib.request.urlopen(request, timeout=20) as response:  # via the egress proxy
        data = json.loads(response.read(65536))
    return f"{params['city']}: {data.get('temp_c')} °C, {data.get('summary', '')}".strip()
