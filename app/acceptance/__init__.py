"""Why a draft is rejected: the pure diagnosis and breakdowns (diagnosis, breakdown) and the HTTP
answers that read them from the store (api, detail_api)."""
