import Serq.IR
