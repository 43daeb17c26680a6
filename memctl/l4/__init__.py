"""L4, the raw-session layer: parsing GenericAgent's raw logs (`logs`), their reversible
compression (`codec`), history extraction (`history`), the monthly zips and their manifest
(`archive`, `manifest`, `sessions`), and scrubbing a purged string out of them (`purge`).
Reads `temp/model_responses/`, writes `L4_raw_sessions/`. Imports only `memctl.core`."""
