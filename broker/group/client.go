package group

import "context"

// Client is the client a request came from, for DescribeGroups' members:
// the listener puts it in the request's context with WithClient.
type Client struct {
	ID, Host string
}

type clientKey struct{}

// WithClient returns ctx carrying the client a group request came from.
func WithClient(ctx context.Context, c Client) context.Context {
	return context.WithValue(ctx, clientKey{}, c)
}

func clientFrom(ctx context.Context) Client {
	c, _ := ctx.Value(clientKey{}).(Client)
	return c
}
