"""Ready network models for `links: {preset: NAME}`, so results line up with
other testbeds'. One preset so far, `test-plans`: libp2p/test-plans'
gossipsub-interop network (gossipsub-interop/network_graph.py, checked at
commit f4942573), which its Shadow runs use:

- 8 regions; each node lands in one at random, weighted by the region's
  weight (their `random.choices(locations, weights=...)`);
- a latency between every two regions (and within one), an edge `latency`
  of Shadow's network graph. Shadow delays each packet by its path's edge
  latency once, in the direction it travels: the figures are one-way, and a
  round trip costs twice the figure (their values look like round trips,
  e.g. 70 ms Europe - NA east; Shadow applies them one-way all the same).
  This preset applies each figure one-way, as `links.latency` always is, so
  a message crosses a pair in the same time as under Shadow. Their table
  is directed; its one asymmetric pair (South America -> South Africa 195 ms,
  back 190 ms) is taken as the mean, 192.5 ms, since our links are symmetric;
- two bandwidth classes drawn per node by weight: supernode 1024 Mbit/s
  (20 %) and fullnode 50 Mbit/s (80 %). Shadow caps a host's up and down
  link; the testbed shapes a node's uplink, so the class is its `uplink`.

A group's own `region` or `uplink` takes the place of the draw for its nodes.
Each draw is seeded per node ("region/<name>", "class/<name>").
"""

from __future__ import annotations

from dataclasses import dataclass

MBIT = 1_000_000


@dataclass(frozen=True)
class NetworkPreset:
    name: str
    regions: tuple[tuple[str, int], ...]  # (region, weight)
    latency_ms: tuple[tuple[str, str, float], ...]  # one-way, symmetric, every pair once (a == b within one)
    classes: tuple[tuple[str, int, int], ...]  # (class, uplink bits/s, weight)

    def matrix(self) -> dict[str, dict[str, float]]:
        """The latency as `links.latency.matrix` takes it."""
        out: dict[str, dict[str, float]] = {}
        for a, b, ms in self.latency_ms:
            out.setdefault(a, {})[b] = ms
        return out


TEST_PLANS = NetworkPreset(
    name="test-plans",
    regions=(("australia", 290), ("europe", 5599), ("east_asia", 1059), ("west_asia", 161), ("na_east", 2894),
             ("na_west", 1240), ("south_africa", 47), ("south_america", 36)),
    latency_ms=(
        ("australia", "australia", 2), ("australia", "east_asia", 110), ("australia", "europe", 165),
        ("australia", "na_west", 110), ("australia", "na_east", 150), ("australia", "south_america", 190),
        ("australia", "south_africa", 220), ("australia", "west_asia", 180),
        ("east_asia", "east_asia", 4), ("east_asia", "europe", 125), ("east_asia", "na_west", 100),
        ("east_asia", "na_east", 140), ("east_asia", "south_america", 175), ("east_asia", "south_africa", 175),
        ("east_asia", "west_asia", 110),
        ("europe", "europe", 2), ("europe", "na_west", 110), ("europe", "na_east", 70),
        ("europe", "south_america", 140), ("europe", "south_africa", 95), ("europe", "west_asia", 60),
        ("na_west", "na_west", 2), ("na_west", "na_east", 60), ("na_west", "south_america", 100),
        ("na_west", "south_africa", 160), ("na_west", "west_asia", 150),
        ("na_east", "na_east", 2), ("na_east", "south_america", 100), ("na_east", "south_africa", 130),
        ("na_east", "west_asia", 110),
        ("south_america", "south_america", 7), ("south_america", "south_africa", 192.5),
        ("south_america", "west_asia", 145),
        ("south_africa", "south_africa", 7), ("south_africa", "west_asia", 110),
        ("west_asia", "west_asia", 5),
    ),
    classes=(("supernode", 1024 * MBIT, 20), ("fullnode", 50 * MBIT, 80)),
)

PRESETS = {p.name: p for p in (TEST_PLANS,)}
