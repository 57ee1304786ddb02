package gpuworker

import (
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// routes builds the worker's HTTP API.
func (w *Worker) routes(reg *prometheus.Registry) http.Handler {
	r := chi.NewRouter()
	r.Use(w.crashGate)
	r.Route("/v1", func(r chi.Router) {
		r.Use(w.countCrash)
		r.With(w.injectErrors).Post("/chat/completions", w.handleChat)
		r.With(w.injectErrors).Post("/completions", w.handleCompletions)
		r.With(w.injectErrors).Post("/responses", w.handleResponses)
		r.Get("/responses/{id}", w.handleGetResponse)
		r.Delete("/responses/{id}", w.handleDeleteResponse)
		r.Post("/embeddings", w.handleEmbeddings)
		r.Get("/models", w.handleModels)
	})
	r.Get("/health", w.handleHealth)
	r.Method(http.MethodGet, "/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	r.Get("/admin/faults", w.handleGetFaults)
	r.Put("/admin/faults", w.handlePutFaults)
	return r
}

func (w *Worker) handleChat(rw http.ResponseWriter, r *http.Request) {
	var req chatRequest
	if !w.readRequest(rw, r, &req, &req.Model) {
		return
	}
	maxTokens, err := req.maxTokens(defaultChatMaxTokens)
	if err != nil {
		writeError(rw, err)
		return
	}
	n, err := req.choices()
	if err != nil {
		writeError(rw, err)
		return
	}
	p, err := chatPrompt(req.Messages)
	if err != nil {
		writeError(rw, err)
		return
	}
	w.serveGeneration(rw, r, apiChat, req.genParams, req.specs([]prompt{p}, maxTokens, n), n)
}

func (w *Worker) handleCompletions(rw http.ResponseWriter, r *http.Request) {
	var req completionRequest
	if !w.readRequest(rw, r, &req, &req.Model) {
		return
	}
	maxTokens, err := req.maxTokens(defaultCompletionMaxTokens)
	if err != nil {
		writeError(rw, err)
		return
	}
	n, err := req.choices()
	if err != nil {
		writeError(rw, err)
		return
	}
	prompts, err := parsePrompts("prompt", req.Prompt)
	if err != nil {
		writeError(rw, err)
		return
	}
	w.serveGeneration(rw, r, apiCompletions, req.genParams, req.specs(prompts, maxTokens, n), n)
}

func (w *Worker) handleModels(rw http.ResponseWriter, _ *http.Request) {
	writeJSON(rw, http.StatusOK, modelList{
		Object: "list",
		Data: []modelCard{{ID: w.model, Object: "model", Created: w.wall0.Unix(), OwnedBy: "sluice-gpuworker",
			MaxLen: w.maxModelLen()}},
	})
}

// maxModelLen is the longest request (prompt plus output) the engine
// accepts: the whole KV cache.
func (w *Worker) maxModelLen() int {
	return w.prof.KVBlocks() * BlockSize
}

// handleHealth answers 200 while the worker accepts work, like vLLM's
// /health, and 503 once Run has stopped.
func (w *Worker) handleHealth(rw http.ResponseWriter, _ *http.Request) {
	w.mu.Lock()
	stopped := w.stopped
	w.mu.Unlock()
	if stopped {
		writeError(rw, ErrStopped)
		return
	}
	rw.WriteHeader(http.StatusOK)
}
