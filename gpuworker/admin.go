package gpuworker

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// faultsJSON is the wire form of Faults on /admin/faults. AddedLatency is a
// Go duration string ("250ms"); an empty string means zero.
type faultsJSON struct {
	ErrorRate    float64 `json:"error_rate"`
	ErrorStatus  int     `json:"error_status"`
	AddedLatency string  `json:"added_latency"`
	StallAfter   int     `json:"stall_after"`
	CrashAfter   int     `json:"crash_after"`
}

func toFaultsJSON(f Faults) faultsJSON {
	return faultsJSON{
		ErrorRate:    f.ErrorRate,
		ErrorStatus:  f.ErrorStatus,
		AddedLatency: f.AddedLatency.String(),
		StallAfter:   f.StallAfter,
		CrashAfter:   f.CrashAfter,
	}
}

func (j faultsJSON) faults() (Faults, error) {
	f := Faults{ErrorRate: j.ErrorRate, ErrorStatus: j.ErrorStatus, StallAfter: j.StallAfter, CrashAfter: j.CrashAfter}
	if j.AddedLatency != "" {
		d, err := time.ParseDuration(j.AddedLatency)
		if err != nil {
			return Faults{}, &FaultError{Field: "added_latency", Reason: fmt.Sprintf("must be a duration such as \"250ms\": %v", err)}
		}
		f.AddedLatency = d
	}
	return f, f.Validate()
}

// handleGetFaults answers GET /admin/faults with the faults in force.
func (w *Worker) handleGetFaults(rw http.ResponseWriter, _ *http.Request) {
	writeJSON(rw, http.StatusOK, toFaultsJSON(w.Faults()))
}

// handlePutFaults replaces the faults in force with the JSON body, decoded
// strictly: an unknown field, a wrong type or a bad value is a 400 naming
// the field, and changes nothing. It answers with the new faults.
func (w *Worker) handlePutFaults(rw http.ResponseWriter, r *http.Request) {
	f, err := decodeFaults(http.MaxBytesReader(rw, r.Body, 1<<20))
	if err != nil {
		writeError(rw, err)
		return
	}
	if err := w.SetFaults(f); err != nil {
		writeError(rw, faultRequestError(err))
		return
	}
	writeJSON(rw, http.StatusOK, toFaultsJSON(f))
}

func decodeFaults(body io.Reader) (Faults, error) {
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	var j faultsJSON
	if err := dec.Decode(&j); err != nil {
		return Faults{}, faultDecodeError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Faults{}, invalidRequest("", "body must hold a single JSON object")
	}
	f, err := j.faults()
	if err != nil {
		return Faults{}, faultRequestError(err)
	}
	return f, nil
}

// faultDecodeError names the field a JSON decoding error is about.
func faultDecodeError(err error) error {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) && typeErr.Field != "" {
		return invalidRequest(typeErr.Field, "%s must be a %s, got %s", typeErr.Field, typeErr.Type, typeErr.Value)
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		field := strings.Trim(name, `"`)
		return invalidRequest(field, "unknown field %q", field)
	}
	return invalidRequest("", "invalid JSON body: %v", err)
}

// faultRequestError turns a validation error into a 400 naming the first
// bad field.
func faultRequestError(err error) error {
	var fe *FaultError
	if errors.As(err, &fe) {
		return invalidRequest(fe.Field, "%s", err.Error())
	}
	return invalidRequest("", "%s", err.Error())
}
