package gpuworker

import (
	"fmt"
	"net/http"
	"sync"

	"github.com/go-chi/chi/v5"
)

// responseStore keeps the newest Responses API responses a worker made
// (Options.StoreResponses), with the conversation each ended, as vLLM's
// response store does in its process's memory: a request continuing one
// runs its whole history again (which the prefix cache may hold).
type responseStore struct {
	max int

	mu    sync.Mutex
	byID  map[string]storedResponse
	order []string // by put, oldest first
}

type storedResponse struct {
	obj      *responseObject
	messages []chatMessage // the conversation, the response's answer last
}

func newResponseStore(max int) *responseStore {
	return &responseStore{max: max, byID: map[string]storedResponse{}}
}

// put keeps resp and its conversation, dropping the oldest past the bound.
func (s *responseStore) put(resp *responseObject, messages []chatMessage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.byID[resp.ID]; !ok {
		s.order = append(s.order, resp.ID)
	}
	s.byID[resp.ID] = storedResponse{obj: resp, messages: messages}
	for len(s.byID) > s.max && len(s.order) > 0 {
		delete(s.byID, s.order[0])
		s.order = s.order[1:]
	}
}

// get returns id's stored response; false without a store too.
func (s *responseStore) get(id string) (storedResponse, bool) {
	if s == nil {
		return storedResponse{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.byID[id]
	return r, ok
}

// remove forgets id and reports whether it was kept.
func (s *responseStore) remove(id string) bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.byID[id]; !ok {
		return false
	}
	delete(s.byID, id)
	for i, o := range s.order {
		if o == id {
			s.order = append(s.order[:i], s.order[i+1:]...)
			break
		}
	}
	return true
}

func responseNotFound(id string) *apiError {
	return &apiError{status: http.StatusNotFound, typ: "invalid_request_error", param: "response_id",
		code: "not_found", message: fmt.Sprintf("Response with id '%s' not found.", id)}
}

// handleGetResponse serves GET /v1/responses/{id}.
func (w *Worker) handleGetResponse(rw http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	sr, ok := w.stored.get(id)
	if !ok {
		writeError(rw, responseNotFound(id))
		return
	}
	writeJSON(rw, http.StatusOK, sr.obj)
}

// handleDeleteResponse serves DELETE /v1/responses/{id}.
func (w *Worker) handleDeleteResponse(rw http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	if !w.stored.remove(id) {
		writeError(rw, responseNotFound(id))
		return
	}
	writeJSON(rw, http.StatusOK, map[string]any{"id": id, "object": "response", "deleted": true})
}
