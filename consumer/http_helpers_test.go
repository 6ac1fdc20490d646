package consumer_test

import (
	"net/http"
	"net/http/httptest"

	"github.com/segmentio/kafka-go"
)

func newRecorder() *httptest.ResponseRecorder { return httptest.NewRecorder() }

func newRequest(method, target string) (*http.Request, error) {
	return httptest.NewRequest(method, target, nil), nil
}

type kafkaHeader = kafka.Header
